"""AWS without AWS: moto's server on loopback, seeded with what aws_infra looks up.

moto ships no Ubuntu 24.04 arm64 image and SSM parameters under /aws/ cannot be written through the
API, so this starts moto in-process: MOTO_AMIS_PATH (read when moto is imported) adds Canonical's images,
and the public SSM parameter that names the latest one is put straight into moto's SSM backend.

    python -m tests.tools.moto_aws PORT [PIDFILE]     (serves until killed)
    python -m tests.tools.moto_aws PORT PIDFILE --consoles NAME...

With --consoles, it is the cluster scenario's EC2 console: one instance per container NAME (tag Name, region
CONSOLE_REGION), whose console output (GetConsoleOutput) is that container's `docker logs`, where its first boot
printed its SSH host keys as cloud-init does (tests/bed/images). An instance whose tag testbed/console holds a text
shows that text instead (a forged console). It exits once the first container is gone (the scenario destroyed).
Beside PIDFILE it writes consoles.json: {"pid", "region", "instances": {NAME: instance id}}, what the test bed's
inventory plugin gives each host (tests/tools/inventory_plugins/testbed_ec2_access.py) without asking the API.

running(port) does the same from a test, and account_counts(ec2) is what a refusal must leave as it was.
"""

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CANONICAL = "099720109477"
ACCOUNT = "123456789012"  # moto's default account
REGIONS = ["us-east-1", "us-west-2", "eu-west-1", "eu-central-1"]
SSM_PARAMETER = "/aws/service/canonical/ubuntu/server/24.04/stable/current/arm64/hvm/ebs-gp3/ami-id"
IMAGES = [
    # (id, name, architecture): the newest arm64 one is what the SSM parameter names.
    ("ami-0a1b2c3d4e5f60001", "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-arm64-server-20260901", "arm64"),
    ("ami-0a1b2c3d4e5f60002", "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-arm64-server-20261015", "arm64"),
    ("ami-0a1b2c3d4e5f60003", "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20261015", "x86_64"),
]
LATEST_ARM64 = IMAGES[1][0]


def images_file():
    images = [{"ami_id": ami_id, "name": name, "description": "Canonical, Ubuntu, 24.04, " + architecture,
               "owner_id": CANONICAL, "public": True, "state": "available", "architecture": architecture,
               "virtualization_type": "hvm", "hypervisor": "xen", "root_device_type": "ebs",
               "root_device_name": "/dev/sda1", "sriov": "simple", "image_type": "machine",
               "image_location": f"{CANONICAL}/{name}", "platform": None,
               "creation_date": "20" + name[-8:-6] + "-" + name[-4:-2] + "-" + name[-2:] + "T00:00:00.000Z"}
              for ami_id, name, architecture in IMAGES]
    handle, path = tempfile.mkstemp(prefix="moto-amis-", suffix=".json")
    with os.fdopen(handle, "w") as out:
        json.dump(images, out)
    return path


CONSOLE_REGION = "eu-west-1"


def docker_consoles():
    """moto's GetConsoleOutput answering with the log of the container the instance is named after."""
    from moto.core.responses import ActionResult  # pylint: disable=import-outside-toplevel
    from moto.ec2.responses.general import General  # pylint: disable=import-outside-toplevel
    from moto.ec2.utils import Base64EncodedString  # pylint: disable=import-outside-toplevel
    from moto.core.utils import utcnow  # pylint: disable=import-outside-toplevel

    def get_console_output(self):
        instance = self.ec2_backend.get_instance(self._get_param("InstanceId"))  # pylint: disable=protected-access
        tags = {tag["key"]: tag["value"] for tag in instance.get_tags()}
        text = tags.get("testbed/console")
        if text is None:
            text = subprocess.run(["docker", "logs", tags.get("Name", "")], capture_output=True, text=True,
                                  check=False).stdout
        return ActionResult({"InstanceId": instance.id, "Timestamp": utcnow(),
                             "Output": Base64EncodedString.from_raw_string(text)})

    General.get_console_output = get_console_output


def volumes_name_their_snapshot():
    """AWS answers SnapshotId "" for a volume made from no snapshot; moto leaves it out, and amazon.aws's ec2_vol_info
    reads it as if always there (aws_infra's cost reads the cluster's volumes)."""
    from moto.ec2.models import elastic_block_store  # pylint: disable=import-outside-toplevel
    made = elastic_block_store.Volume.__init__

    def init(self, *args, **kwargs):
        made(self, *args, **kwargs)
        if self.snapshot_id is None:
            self.snapshot_id = ""

    elastic_block_store.Volume.__init__ = init


RATE_MESSAGE = ("You've reached the maximum modification rate per volume limit. Wait at least 6 hours between "
                "modifications per EBS volume.")  # AWS's words, as users of ModifyVolume have reported them


def volume_modifications_as_aws(patch=setattr):
    """moto keeps every modification of a volume and refuses none. AWS's DescribeVolumesModifications answers only a
    volume's most recent one, and ModifyVolume refuses a fifth in a rolling 24 hours with the code
    VolumeModificationRateExceeded (ModifyVolume's reference). patch: setattr, or a test's monkeypatch.setattr."""
    import datetime  # pylint: disable=import-outside-toplevel
    from moto.core.utils import utcnow  # pylint: disable=import-outside-toplevel
    from moto.ec2.exceptions import EC2ClientError  # pylint: disable=import-outside-toplevel
    from moto.ec2.models.elastic_block_store import EBSBackend  # pylint: disable=import-outside-toplevel
    modify, describe = EBSBackend.modify_volume, EBSBackend.describe_volumes_modifications

    def modify_volume(self, volume_id, *args, **kwargs):
        day_ago = utcnow() - datetime.timedelta(hours=24)
        if sum(item.start_time > day_ago for item in self.get_volume(volume_id).modifications) >= 4:
            raise EC2ClientError("VolumeModificationRateExceeded", RATE_MESSAGE)
        return modify(self, volume_id, *args, **kwargs)

    def describe_volumes_modifications(self, *args, **kwargs):
        latest = {}
        for item in describe(self, *args, **kwargs):
            if item.volume_id not in latest or item.start_time >= latest[item.volume_id].start_time:
                latest[item.volume_id] = item
        return list(latest.values())

    patch(EBSBackend, "modify_volume", modify_volume)
    patch(EBSBackend, "describe_volumes_modifications", describe_volumes_modifications)


def public_addresses_on_loopback():
    """moto gives instances public addresses in 54.214.0.0/16, AWS's own: a test that waits for SSH on one (the bound
    of aws_infra_ssh_timeout) would send traffic off this machine. These are in 127.0.0.0/8 instead, where nothing
    answers on port 22 of this machine."""
    import random  # pylint: disable=import-outside-toplevel
    from moto.ec2.models import elastic_network_interfaces  # pylint: disable=import-outside-toplevel
    elastic_network_interfaces.random_public_ip = lambda: "127.214.%d.%d" % (random.randrange(255),
                                                                             1 + random.randrange(254))


def placement_groups():
    """moto 5.2 has no placement-group API (its calls answer HTTP 500). This answers CreatePlacementGroup (with its
    tags), DescribePlacementGroups (by name, by the filters group-name and tag:KEY) and DeletePlacementGroup as AWS does,
    per account and region, so that aws_infra's managed group and teardown's check of its tag are tested."""
    import secrets  # pylint: disable=import-outside-toplevel
    from moto.core.responses import ActionResult  # pylint: disable=import-outside-toplevel
    from moto.ec2.exceptions import EC2ClientError  # pylint: disable=import-outside-toplevel
    from moto.ec2.responses import EC2Response  # pylint: disable=import-outside-toplevel
    made = {}  # (account, region) -> {name: group}

    def groups(self):
        return made.setdefault((self.current_account, self.region), {})

    def create_placement_group(self):
        name = self._get_param("GroupName")  # pylint: disable=protected-access
        if name in groups(self):
            raise EC2ClientError("InvalidPlacementGroup.Duplicate", f"The Placement Group '{name}' already exists.")
        tags = self._parse_tag_specification("placement-group").get("placement-group", {})  # pylint: disable=protected-access
        group = {"GroupName": name, "State": "available", "Strategy": self._get_param("Strategy"),  # pylint: disable=protected-access
                 "GroupId": "pg-" + secrets.token_hex(8), "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        groups(self)[name] = group
        return ActionResult({"PlacementGroup": group})

    def describe_placement_groups(self):
        names = self._get_param("GroupNames", [])  # pylint: disable=protected-access
        filters = self._filters_from_querystring()  # pylint: disable=protected-access
        missing = [name for name in names if name not in groups(self)]
        if missing:
            raise EC2ClientError("InvalidPlacementGroup.Unknown", f"The Placement Group '{missing[0]}' is unknown.")

        def chosen(group):
            tags = {tag["Key"]: tag["Value"] for tag in group["Tags"]}
            return ((not names or group["GroupName"] in names)
                    and all(group["GroupName"] in values if key == "group-name" else
                            tags.get(key[4:]) in values if key.startswith("tag:") else True
                            for key, values in filters.items()))
        return ActionResult({"PlacementGroups": [group for group in groups(self).values() if chosen(group)]})

    def delete_placement_group(self):
        name = self._get_param("GroupName")  # pylint: disable=protected-access
        if groups(self).pop(name, None) is None:
            raise EC2ClientError("InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown.")
        return ActionResult({})

    EC2Response.create_placement_group = create_placement_group
    EC2Response.describe_placement_groups = describe_placement_groups
    EC2Response.delete_placement_group = delete_placement_group


def load_images():
    """Has moto read IMAGES: its AMI module reads the file MOTO_AMIS_PATH names when it is imported, and later only
    asks whether the variable is set. So the file is removed at once (each server left one in /tmp before)."""
    path = images_file()
    os.environ["MOTO_AMIS_PATH"] = path
    try:
        import moto.ec2.models.amis  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    finally:
        os.unlink(path)


def serve(port, pidfile=None, consoles=()):
    # Before moto is imported (load_images): its settings may be read then.
    os.environ.setdefault("MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION", "true")
    os.environ.setdefault("MOTO_ENABLE_AMI_VALIDATION", "true")
    load_images()
    volumes_name_their_snapshot()
    volume_modifications_as_aws()
    public_addresses_on_loopback()
    placement_groups()
    from moto.server import ThreadedMotoServer  # pylint: disable=import-outside-toplevel
    from moto.ssm.models import Parameter, ssm_backends  # pylint: disable=import-outside-toplevel

    # Seeded before the port opens: whoever waits for the port (running() below) or the pid file then asks a server
    # that has it all, not one still seeding.
    for region in REGIONS:
        ssm_backends[ACCOUNT][region]._parameters[SSM_PARAMETER].append(  # pylint: disable=protected-access
            Parameter(account_id=ACCOUNT, name=SSM_PARAMETER, value=LATEST_ARM64, parameter_type="String",
                      description=None, allowed_pattern=None, keyid=None, last_modified_date=time.time(),
                      version=1, data_type="aws:ec2:image"))
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    if consoles:
        import boto3  # pylint: disable=import-outside-toplevel
        docker_consoles()
        ec2 = boto3.client("ec2", endpoint_url=f"http://127.0.0.1:{port}", region_name=CONSOLE_REGION,
                           aws_access_key_id="testing", aws_secret_access_key="testing")
        instances = {name: ec2.run_instances(ImageId=LATEST_ARM64, InstanceType="c8g.large", MinCount=1, MaxCount=1,
                                             TagSpecifications=[{"ResourceType": "instance",
                                                                 "Tags": [{"Key": "Name", "Value": name}]}])["Instances"][0]["InstanceId"]
                     for name in consoles}
    if pidfile:
        with open(pidfile, "w") as out:
            out.write(str(os.getpid()))
        if consoles:
            written = Path(pidfile).with_name("consoles.json.tmp")
            written.write_text(json.dumps({"pid": os.getpid(), "region": CONSOLE_REGION, "instances": instances}))
            written.replace(written.with_suffix(""))
    print(f"moto on http://127.0.0.1:{port}, {SSM_PARAMETER} = {LATEST_ARM64}", flush=True)
    first = consoles[0] if consoles else None
    seen = container_id(first) if first else None
    while True:
        time.sleep(5 if first else 3600)
        if first and container_id(first) != seen:
            print(f"{first} is gone: the scenario was destroyed", flush=True)
            os._exit(0)  # pylint: disable=protected-access


def container_id(name):
    listed = subprocess.run(["docker", "ps", "-q", "--no-trunc", "--filter", f"name=^{name}$"], capture_output=True,
                            text=True, check=False)
    return listed.stdout.strip()


@contextlib.contextmanager
def running(port):
    """This server in a child process on 127.0.0.1:PORT, until the block ends. Yields its endpoint URL."""
    # here, not at the top: the server itself (python -m tests.tools.moto_aws) runs without the collection importable
    from tests.tools.llama_cpp import wait_for_port  # pylint: disable=import-outside-toplevel

    root = Path(__file__).resolve().parents[2]
    server = subprocess.Popen([sys.executable, "-m", "tests.tools.moto_aws", str(port)], cwd=root,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, server)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def account_counts(ec2):
    """What a refused or check-mode run must leave as it was: every kind of resource provisioning creates."""
    running_states = [{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    return {
        "vpcs": len(ec2.describe_vpcs()["Vpcs"]),
        "subnets": len(ec2.describe_subnets()["Subnets"]),
        "security groups": len(ec2.describe_security_groups()["SecurityGroups"]),
        "internet gateways": len(ec2.describe_internet_gateways()["InternetGateways"]),
        "route tables": len(ec2.describe_route_tables()["RouteTables"]),
        "instances": sum(len(r["Instances"]) for r in ec2.describe_instances(Filters=running_states)["Reservations"]),
        "volumes": len(ec2.describe_volumes()["Volumes"]),
        "key pairs": len(ec2.describe_key_pairs()["KeyPairs"]),
    }


if __name__ == "__main__":
    ARGS = sys.argv[1:]
    NAMES = ARGS[ARGS.index("--consoles") + 1:] if "--consoles" in ARGS else []
    POSITIONAL = ARGS[:ARGS.index("--consoles")] if "--consoles" in ARGS else ARGS
    serve(int(POSITIONAL[0]), POSITIONAL[1] if len(POSITIONAL) > 1 else None, NAMES)
