"""The provisioned cluster, read back with boto3 from moto: who may reach what, IMDSv2, encryption, no
public workers, the placement group, the tags; scaling; the inventory plugin; check mode; teardown that removes
the cluster and spares the decoys. Bad input: tests/integration/bad_input/test_aws_infra.py."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import boto3

testinfra_hosts = ["ansible://aws-controller?ansible_inventory=" + os.environ["MOLECULE_INVENTORY_FILE"]]
ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
sys.path.insert(0, str(ROOT))
from tests.tools import moto_aws  # noqa: E402  pylint: disable=wrong-import-position
from tests.tools.ansible_inventory import unwrapped  # noqa: E402  pylint: disable=wrong-import-position
ENDPOINT = "http://127.0.0.1:5123"
REGION = "eu-west-1"  # where the scenario provisions; the default region of every command here is us-east-1
CLUSTER = "molecule-llama"
TAG = "graviton.llama_rpc/cluster"
ENV = dict(os.environ, AWS_URL=ENDPOINT, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
           AWS_DEFAULT_REGION="us-east-1")
BASE = {"aws_infra_region": REGION, "aws_infra_cluster_name": CLUSTER, "aws_infra_admin_cidr": "198.51.100.7/32",
        "aws_infra_key_name": "molecule-key", "aws_infra_wait_for_ssh": False,
        "aws_infra_rpc_port": 50099, "aws_infra_server_port": 8099,
        "aws_infra_server_allowed_sources": ["10.42.0.0/16", "10.60.0.7"]}
RPC_PORT = 50099  # not llama.cpp's default: it must reach the security group, the workers' tag and the inventory
SERVER_PORT = 8099  # not llama-server's default (8080): the same for the master's group, tag and inventory


def ec2():
    return boto3.client("ec2", endpoint_url=ENDPOINT, region_name=REGION, aws_access_key_id="testing",
                        aws_secret_access_key="testing")


def cluster_filter(*extra):
    return [{"Name": f"tag:{TAG}", "Values": [CLUSTER]}, *extra]


def instances(role=None, states=("pending", "running")):
    filters = cluster_filter({"Name": "instance-state-name", "Values": list(states)})
    if role:
        filters.append({"Name": "tag:graviton.llama_rpc/role", "Values": [role]})
    return [i for r in ec2().describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]


def playbook(name, extra, *args, env=None):
    # The controller's own Python for localhost (interpreter discovery could pick another one).
    extra = dict(extra, ansible_python_interpreter=sys.executable)
    return subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(ROOT / "playbooks" / name),
                           "-e", json.dumps(extra), *args], capture_output=True, text=True, env=env or ENV,
                          timeout=900, check=False)


def groups():
    found = ec2().describe_security_groups(Filters=cluster_filter())["SecurityGroups"]
    return {group["GroupName"]: group for group in found}


def test_rpc_port_only_from_the_master_group_and_nothing_open_to_the_world():
    found = groups()
    master, workers = found[f"{CLUSTER}-master"], found[f"{CLUSTER}-workers"]
    rpc = [rule for rule in workers["IpPermissions"] if rule.get("FromPort") == RPC_PORT]
    assert not [rule for rule in workers["IpPermissions"] if rule.get("FromPort") == 50052]
    assert len(rpc) == 1 and not rpc[0].get("IpRanges") and not rpc[0].get("Ipv6Ranges")
    assert [pair["GroupId"] for pair in rpc[0]["UserIdGroupPairs"]] == [master["GroupId"]]
    # node_exporter (role monitoring) and SSH, from the master's group too, and nothing else on the workers
    assert sorted(rule.get("FromPort") for rule in workers["IpPermissions"]) == [22, 9100, RPC_PORT], workers["IpPermissions"]
    assert all([pair["GroupId"] for pair in rule["UserIdGroupPairs"]] == [master["GroupId"]] and not rule.get("IpRanges")
               for rule in workers["IpPermissions"]), workers["IpPermissions"]
    ssh = [rule for rule in master["IpPermissions"] if rule.get("FromPort") == 22]
    assert [r["CidrIp"] for r in ssh[0]["IpRanges"]] == ["198.51.100.7/32"]
    # llama-server only from the private sources given (one address as its /32), and nothing else on the master
    server = [rule for rule in master["IpPermissions"] if rule.get("FromPort") == SERVER_PORT]
    assert len(server) == 1 and server[0]["ToPort"] == SERVER_PORT, master["IpPermissions"]
    assert sorted(r["CidrIp"] for r in server[0]["IpRanges"]) == ["10.42.0.0/16", "10.60.0.7/32"], server
    assert sorted(rule.get("FromPort") for rule in master["IpPermissions"]) == [22, SERVER_PORT], master["IpPermissions"]
    for group in found.values():
        for rule in group["IpPermissions"]:
            assert all(r["CidrIp"] != "0.0.0.0/0" for r in rule.get("IpRanges", [])), (group["GroupName"], rule)


def test_instances_imdsv2_encrypted_private_workers_placement_and_tags():
    master, workers = instances("master"), instances("workers")
    assert len(master) == 1 and len(workers) == 2
    # The master keeps the model (40 GB by default) in its page cache with 16 GiB to spare: c8g.8xlarge (64 GiB).
    assert master[0]["InstanceType"] == "c8g.8xlarge" and {worker["InstanceType"] for worker in workers} == {"c8g.4xlarge"}
    for instance in master + workers:
        assert instance["MetadataOptions"]["HttpTokens"] == "required"
        # moto 5.2 drops the instances' placement group: the group itself is checked below (tests/tools/moto_aws.py).
        # It also drops a block device's Throughput and Iops: the volumes' provisioned performance is not checkable here.
        tags = {tag["Key"]: tag["Value"] for tag in instance["Tags"]}
        assert tags[TAG] == CLUSTER and tags["managed-by"] == "graviton.llama_rpc" and "graviton.llama_rpc/expires" in tags
        volumes = [m["Ebs"]["VolumeId"] for m in instance["BlockDeviceMappings"]]
        for volume in ec2().describe_volumes(VolumeIds=volumes)["Volumes"]:
            # 30 GiB and the model (40 GB); the master twice the model (the served one and the next, fetched beside it)
            expected = 110 if instance in master else 70
            assert volume["Encrypted"] and volume["VolumeType"] == "gp3" and volume["Size"] == expected
    [group] = ec2().describe_placement_groups(GroupNames=[CLUSTER])["PlacementGroups"]
    assert group["Strategy"] == "cluster" and {tag["Key"]: tag["Value"] for tag in group["Tags"]}[TAG] == CLUSTER, group
    assert master[0].get("PublicIpAddress")
    for worker in workers:
        assert not worker.get("PublicIpAddress"), worker["InstanceId"]
        tags = {tag["Key"]: tag["Value"] for tag in worker["Tags"]}
        assert tags["graviton.llama_rpc/jump"] == master[0]["PublicIpAddress"]


def iam():
    return boto3.client("iam", endpoint_url=ENDPOINT, region_name=REGION, aws_access_key_id="testing",
                        aws_secret_access_key="testing")


# IAM names are the account's, not a region's: they carry the region
IDLE_STOP_ROLE = f"llama-rpc-{CLUSTER}-{REGION}-stop"
WAKE_POLICY = f"llama-rpc-{CLUSTER}-{REGION}-wake"


def test_the_master_alone_may_stop_its_cluster_and_nothing_else():
    """aws_infra_idle_stop: the master's instance profile holds one role, trusted by EC2 alone, whose one policy allows
    StopInstances on instances carrying the cluster's tag in its region, and DescribeInstances (which IAM cannot
    scope); the workers have no profile. (moto stores IAM policies and does not enforce them: the document is the test.)"""
    master, workers = instances("master"), instances("workers")
    profile = master[0]["IamInstanceProfile"]["Arn"]
    assert profile.endswith(":instance-profile/" + IDLE_STOP_ROLE), profile
    assert all("IamInstanceProfile" not in worker for worker in workers)
    client = iam()
    roles = client.get_instance_profile(InstanceProfileName=IDLE_STOP_ROLE)["InstanceProfile"]["Roles"]
    assert [role["RoleName"] for role in roles] == [IDLE_STOP_ROLE]
    trust = client.get_role(RoleName=IDLE_STOP_ROLE)["Role"]["AssumeRolePolicyDocument"]
    trust = json.loads(trust) if isinstance(trust, str) else trust
    assert [(s["Effect"], s["Principal"], s["Action"]) for s in trust["Statement"]] == [
        ("Allow", {"Service": "ec2.amazonaws.com"}, "sts:AssumeRole")]
    assert client.list_role_policies(RoleName=IDLE_STOP_ROLE)["PolicyNames"] == ["stop-this-cluster"]
    assert client.list_attached_role_policies(RoleName=IDLE_STOP_ROLE)["AttachedPolicies"] == []
    document = client.get_role_policy(RoleName=IDLE_STOP_ROLE, PolicyName="stop-this-cluster")["PolicyDocument"]
    document = json.loads(document) if isinstance(document, str) else document
    allowed = {statement["Action"]: statement for statement in document["Statement"]}
    assert set(allowed) == {"ec2:StopInstances", "ec2:DescribeInstances"}
    assert all(statement["Effect"] == "Allow" for statement in document["Statement"])
    stop = allowed["ec2:StopInstances"]
    assert stop["Resource"] == f"arn:aws:ec2:{REGION}:*:instance/*"
    assert stop["Condition"] == {"StringEquals": {f"aws:ResourceTag/{TAG}": CLUSTER}}
    assert allowed["ec2:DescribeInstances"]["Resource"] == "*"


def test_the_gateways_wake_may_start_the_cluster_and_nothing_else():
    """The managed policy for the gateway's host: StartInstances on the cluster's tag in its region, DescribeInstances."""
    client = iam()
    [policy] = [p for p in client.list_policies(Scope="Local")["Policies"] if p["PolicyName"] == WAKE_POLICY]
    version = client.get_policy_version(PolicyArn=policy["Arn"], VersionId=policy["DefaultVersionId"])
    document = version["PolicyVersion"]["Document"]
    document = json.loads(document) if isinstance(document, str) else document
    allowed = {statement["Action"]: statement for statement in document["Statement"]}
    assert set(allowed) == {"ec2:StartInstances", "ec2:DescribeInstances"}
    assert allowed["ec2:StartInstances"]["Resource"] == f"arn:aws:ec2:{REGION}:*:instance/*"
    assert allowed["ec2:StartInstances"]["Condition"] == {"StringEquals": {f"aws:ResourceTag/{TAG}": CLUSTER}}


def test_inventory_plugin_graph():
    result = subprocess.run(["ansible-inventory", "-i", str(ROOT / "inventories" / "aws" / "aws_ec2.yml"), "--graph"],
                            capture_output=True, text=True, env=ENV, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    graph = result.stdout
    print(graph)
    master_section = graph.split("@llama_master:")[1].split("@")[0]
    worker_section = graph.split("@llama_workers:")[1].split("@")[0]
    assert master_section.count(f"{CLUSTER}-master-i-") == 1 and worker_section.count(f"{CLUSTER}-workers-i-") == 2
    assert f"@cluster_{CLUSTER.replace('-', '_')}:" in graph
    assert "decoy" not in graph


def test_inventory_plugin_hands_the_rpc_port_to_the_workers_and_the_server_port_to_the_master():
    """The port the workers' security group admits is the one rpc_worker listens on and the worker list names; the
    port the master's admits is the one llama-server listens on."""
    result = subprocess.run(["ansible-inventory", "-i", str(ROOT / "inventories" / "aws" / "aws_ec2.yml"), "--list"],
                            capture_output=True, text=True, env=ENV, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    hostvars = unwrapped(json.loads(result.stdout))["_meta"]["hostvars"]
    plain = {name: variables.get("rpc_worker_port") for name, variables in hostvars.items() if "decoy" not in name}
    ports = {name: int(value) if value is not None else None for name, value in plain.items()}
    workers = {name: port for name, port in ports.items() if "-workers-" in name}
    assert len(workers) == 2 and set(workers.values()) == {RPC_PORT}, ports
    assert all(port is None for name, port in ports.items() if "-master-" in name), ports
    for worker in instances("workers"):
        assert {tag["Key"]: tag["Value"] for tag in worker["Tags"]}["graviton.llama_rpc/rpc_port"] == str(RPC_PORT)
    exporters = {int(variables["monitoring_exporter_port"]) for name, variables in hostvars.items() if "decoy" not in name}
    assert exporters == {9100}, exporters  # aws_infra_exporter_port, handed to role monitoring
    served = {name: variables.get("rpc_master_server_port") for name, variables in hostvars.items() if "decoy" not in name}
    served = {name: int(value) if value is not None else None for name, value in served.items()}
    assert [port for name, port in served.items() if "-master-" in name] == [SERVER_PORT], served
    assert all(port is None for name, port in served.items() if "-workers-" in name), served


def test_inventory_plugin_connects_as_ubuntu_with_sudo_and_the_workers_through_the_master():
    """The connection variables the cluster scenario runs on (tests/unit/test_access_path.py), from the real aws_ec2
    plugin: a YAML true in compose is dropped on ansible-core 2.19+, which left every task without sudo."""
    result = subprocess.run(["ansible-inventory", "-i", str(ROOT / "inventories" / "aws" / "aws_ec2.yml"), "--list"],
                            capture_output=True, text=True, env=ENV, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    hostvars = {name: variables for name, variables in unwrapped(json.loads(result.stdout))["_meta"]["hostvars"].items()
                if "decoy" not in name}
    master_address = instances("master")[0]["PublicIpAddress"]
    ours = {name: variables for name, variables in hostvars.items() if name.startswith(f"{CLUSTER}-")}
    assert len(ours) == 3, sorted(hostvars)
    for name, variables in ours.items():
        # Found in the region provisioned, which is not the default region of the command that listed it.
        assert variables["placement"]["region"] == REGION != ENV["AWS_DEFAULT_REGION"], (name, variables["placement"])
        assert variables["ansible_user"] == "ubuntu" and variables["ansible_become"] is True, (name, variables)
        if "-master-" in name:
            assert variables["ansible_host"] == master_address and variables["ansible_ssh_common_args"] == ""
        else:
            assert variables["ansible_host"] == variables["private_ip_address"]
            assert variables["ansible_ssh_common_args"] == f"-o ProxyJump=ubuntu@{master_address}"


def test_scaling_adds_and_removes_workers():
    for count in (3, 2):
        run = playbook("provision.yml", dict(BASE, aws_infra_worker_count=count))
        assert run.returncode == 0, run.stdout[-3000:]
        assert len(instances("workers")) == count
    assert len(instances("master")) == 1


def test_check_mode_against_an_empty_account_changes_nothing():
    before = moto_aws.account_counts(ec2())
    run = playbook("provision.yml", dict(BASE, aws_infra_cluster_name="empty-check"), "--check")
    assert run.returncode == 0, run.stdout[-3000:]
    assert "check mode: would create VPC empty-check" in run.stdout
    assert moto_aws.account_counts(ec2()) == before


def decoys_running():
    reservations = ec2().describe_instances(Filters=[{"Name": "tag:purpose", "Values": ["decoy"]},
                                                     {"Name": "instance-state-name", "Values": ["running"]}])["Reservations"]
    return sorted(i["InstanceId"] for r in reservations for i in r["Instances"])


def volumes():
    """{volume id: (IOPS, MiB/s, the tag a stop left)} of the cluster's instances."""
    ids = [instance["InstanceId"] for instance in instances(states=("pending", "running", "stopping", "stopped"))]
    found = ec2().describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": ids}])["Volumes"]
    return {volume["VolumeId"]: (volume.get("Iops"), volume.get("Throughput"),
                                 {tag["Key"]: tag["Value"] for tag in volume.get("Tags", [])}.get("graviton.llama_rpc/provisioned"))
            for volume in found}


def figures(output):
    """The running $/hour, the stopped $/month and the stopped share a playbook printed."""
    running = re.search(r"Running: \$(\d+\.\d\d) per hour", output)
    stopped = re.search(r"Stopped: \$[\d.]+ per hour, \$(\d+\.\d\d) a month \(([\d.]+)% of the running hour\)", output)
    assert running and stopped, output[-3000:]
    return float(running.group(1)), float(stopped.group(1)), float(stopped.group(2))


def test_provisioning_gives_the_volumes_what_was_asked():
    """moto's launch ignores a block device's IOPS and throughput, as AWS keeps a volume's when a setting changes:
    provisioning modifies them to what aws_infra_volume_iops and aws_infra_volume_throughput_mib_s ask."""
    assert set(volumes().values()) == {(4000, 1000, None)}, volumes()


def test_stop_and_start_touch_the_tagged_instances_only_and_find_the_new_address(tmp_path):
    """stop.yml stops the cluster's instances, found by its tag alone (the decoy runs on), and says what it costs stopped;
    a second stop changes nothing and says so; provisioning a stopped cluster is refused (it would launch another);
    start.yml starts them: the master's new public address is found, the workers' jump tag follows it, and the keys
    known_hosts held for its old address are trusted at the new one (the old one forgotten). A start of a cluster that was
    never provisioned is refused, and creates nothing. (start.yml --limit localhost: moto's instances answer no SSH.)"""
    decoys = decoys_running()
    [master] = instances("master")
    old_address = master["PublicIpAddress"]
    known = tmp_path / "known_hosts"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "master_key")], check=True)
    key = " ".join((tmp_path / "master_key.pub").read_text().split()[:2])  # the master's host key, as its console showed it
    known.write_text(f"{old_address} {key}\n")
    power = dict(BASE, aws_infra_known_hosts_file=str(known))

    running_before = figures(playbook("provision.yml", BASE).stdout)
    stopped = playbook("stop.yml", power)
    assert stopped.returncode == 0, stopped.stdout[-3000:]
    assert instances() == [] and len(instances(states=("stopped",))) == 3
    # the volumes lowered to gp3's baseline, what they had in their tag, and the bill printed with them: the storage
    # alone, under 2% of the running hour; no public address the master has given up
    assert set(volumes().values()) == {(3000, 125, "4000/1000")}, volumes()
    assert "lowered to 3000 IOPS and 125 MiB/s" in stopped.stdout
    running, month, share = figures(stopped.stdout)
    # what provisioning said a stop would cost is what the stop costs: the volumes' storage alone
    assert (running, month) == running_before[:2] and share < 2.0, (running, month, share, running_before)
    storage = sum(volume["Size"] for volume in ec2().describe_volumes(VolumeIds=list(volumes()))["Volumes"]) * 0.08
    assert month == round(storage, 2), (month, storage)
    assert "Billed while stopped: the volumes' storage" in stopped.stdout
    assert "(stopped)" in stopped.stdout and old_address not in stopped.stdout
    assert decoys_running() == decoys
    again = playbook("stop.yml", power)
    assert again.returncode == 0 and "every instance is stopped already; nothing changes" in again.stdout
    assert "changed=0" in again.stdout

    over = playbook("provision.yml", BASE)
    assert over.returncode != 0 and f"Cluster {CLUSTER} in {REGION} is stopped" in over.stdout + over.stderr
    assert len(instances(states=("pending", "running", "stopping", "stopped"))) == 3

    # aws_infra_wait_for_ssh=false (BASE): the start returns once the instances run, with no SSH asked of them
    started = playbook("start.yml", power)
    assert started.returncode == 0, started.stdout[-3000:]
    assert "Not waited for, nor its first token timed (aws_infra_wait_for_ssh=false)" in started.stdout
    [master] = instances("master")
    assert len(instances()) == 3 and master["PublicIpAddress"] != old_address
    for worker in instances("workers"):
        tags = {tag["Key"]: tag["Value"] for tag in worker["Tags"]}
        assert tags["graviton.llama_rpc/jump"] == master["PublicIpAddress"]
    assert known.read_text().split() == [master["PublicIpAddress"], *key.split()], known.read_text()
    assert set(volumes().values()) == {(4000, 1000, None)}, volumes()
    assert "restored to 4000 IOPS and 1000 MiB/s" in started.stdout
    assert figures(started.stdout)[0] == running_before[0] and decoys_running() == decoys

    # a master SSH never answers (moto's public addresses are on loopback here, where nothing listens on port 22): the
    # wait ends at aws_infra_ssh_timeout, named, with what to check
    assert master["PublicIpAddress"].startswith("127."), "the wait would send traffic off this machine"
    began = time.monotonic()
    unreachable = playbook("start.yml", dict(power, aws_infra_wait_for_ssh=True, aws_infra_ssh_timeout=3))
    waited = time.monotonic() - began
    said = " ".join((unreachable.stdout + unreachable.stderr).split())
    assert unreachable.returncode != 0 and (f"The master {master['InstanceId']} of cluster {CLUSTER} runs but SSH at its "
                                            f"public address {master['PublicIpAddress']}, port 22, did not answer within 3 s "
                                            "(aws_infra_ssh_timeout)") in said, said[-3000:]
    assert "aws ec2 get-console-output --region eu-west-1" in said and waited < 120, waited

    # The master's volume was modified at provisioning, at the stop and at the start: a fourth modification (this stop)
    # is AWS's last in 24 hours, and AWS (moto answering as it does) refuses the next start's: the volume stays lowered,
    # the start says until when at the latest (a day after the last modification began) and what to run then, and
    # prints the figures as they are.
    [master_volume] = ec2().describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": [master["InstanceId"]]}])["Volumes"]
    assert playbook("stop.yml", power).returncode == 0
    kept = playbook("start.yml", power)
    assert kept.returncode == 0, kept.stdout[-3000:]
    assert re.search(re.escape(master_volume["VolumeId"] + " kept at 3000 IOPS and 125 MiB/s: AWS refused a fifth "
                               "modification in its rolling 24 hours (VolumeModificationRateExceeded: "
                               + moto_aws.RATE_MESSAGE + "); the last one began ") + r"\S+ \S+ UTC\. AWS lets it be "
                     r"modified again by \S+ at the latest: run playbooks/start\.yml then \(on a running cluster it only "
                     r"restores the volumes\)", kept.stdout), kept.stdout[-3000:]
    assert volumes()[master_volume["VolumeId"]] == (3000, 125, "4000/1000")
    assert figures(kept.stdout)[0] < running_before[0]

    counts = moto_aws.account_counts(ec2())
    never = playbook("start.yml", dict(power, aws_infra_cluster_name="never-made"), "--limit", "localhost")
    assert never.returncode != 0
    assert "No instance in eu-west-1 carries the tag graviton.llama_rpc/cluster=never-made" in never.stdout + never.stderr
    assert moto_aws.account_counts(ec2()) == counts


def test_a_nat_gateway_is_in_both_bills_and_goes_when_turned_off():
    """aws_infra_nat_gateway bills every hour, running or stopped: both figures count it, the words say how to stop it,
    and provisioning with it turned off deletes it (and its route) again."""
    without = figures(playbook("provision.yml", BASE).stdout)
    made = playbook("provision.yml", dict(BASE, aws_infra_nat_gateway=True))
    assert made.returncode == 0, made.stdout[-3000:]
    running, month, _share = figures(made.stdout)
    assert round(running - without[0], 2) == 0.05 and round(month - without[1], 1) == 36.5, (running, month, without)
    assert "1 NAT gateway(s) and their Elastic IPs $0.050" in made.stdout
    assert "the NAT gateway and its Elastic IP ($0.050 an hour, plus $0.045 per GB it carries), whether the cluster " \
           "runs or not: set aws_infra_nat_gateway: false" in made.stdout
    nats = ec2().describe_nat_gateways(Filters=cluster_filter({"Name": "state", "Values": ["pending", "available"]}))
    assert len(nats["NatGateways"]) == 1

    gone = playbook("provision.yml", BASE)
    assert gone.returncode == 0, gone.stdout[-3000:]
    assert figures(gone.stdout)[:2] == without[:2]
    assert "NAT gateway" not in re.search(r"Running: [^\n\"]*", gone.stdout).group(0)
    nats = ec2().describe_nat_gateways(Filters=cluster_filter({"Name": "state", "Values": ["pending", "available"]}))
    assert nats["NatGateways"] == []
    routes = [route for table in ec2().describe_route_tables(Filters=cluster_filter())["RouteTables"]
              for route in table["Routes"] if route.get("NatGatewayId")]
    assert routes == []


OTHER_REGION = "us-west-2"


def test_two_clusters_of_one_name_in_two_regions_live_and_die_apart():
    """IAM is the account's: the same cluster name in a second region, with the idle stop, gets a role, profile and wake
    policy of its own, each naming its region; tearing it down leaves the first region's whole."""
    boto3.client("ec2", endpoint_url=ENDPOINT, region_name=OTHER_REGION, aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_key_pair(KeyName="molecule-key")
    other = dict(BASE, aws_infra_region=OTHER_REGION, aws_infra_idle_stop=True, aws_infra_wake_policy=True)
    made = playbook("provision.yml", other)
    assert made.returncode == 0, made.stdout[-3000:]
    client = iam()
    roles = {role["RoleName"] for role in client.list_roles()["Roles"]}
    policies = {policy["PolicyName"]: policy for policy in client.list_policies(Scope="Local")["Policies"]}
    assert {IDLE_STOP_ROLE, f"llama-rpc-{CLUSTER}-{OTHER_REGION}-stop"} <= roles
    assert {WAKE_POLICY, f"llama-rpc-{CLUSTER}-{OTHER_REGION}-wake"} <= set(policies)

    gone = playbook("teardown.yml", other)
    assert gone.returncode == 0, gone.stdout[-3000:]
    assert f"IAM: role:llama-rpc-{CLUSTER}-{OTHER_REGION}-stop, policy:llama-rpc-{CLUSTER}-{OTHER_REGION}-wake" in gone.stdout
    roles = {role["RoleName"] for role in client.list_roles()["Roles"]}
    profiles = {profile["InstanceProfileName"] for profile in client.list_instance_profiles()["InstanceProfiles"]}
    policies = {policy["PolicyName"]: policy for policy in client.list_policies(Scope="Local")["Policies"]}
    assert f"llama-rpc-{CLUSTER}-{OTHER_REGION}-stop" not in roles | profiles
    assert f"llama-rpc-{CLUSTER}-{OTHER_REGION}-wake" not in policies
    # the first region's: whole, still naming its region, still the master's profile
    assert IDLE_STOP_ROLE in roles and IDLE_STOP_ROLE in profiles and WAKE_POLICY in policies
    document = client.get_role_policy(RoleName=IDLE_STOP_ROLE, PolicyName="stop-this-cluster")["PolicyDocument"]
    document = json.loads(document) if isinstance(document, str) else document
    assert {statement["Resource"] for statement in document["Statement"]} == {f"arn:aws:ec2:{REGION}:*:instance/*", "*"}
    [master] = instances("master")
    assert master["IamInstanceProfile"]["Arn"].endswith(":instance-profile/" + IDLE_STOP_ROLE)
    tags = {tag["Key"]: tag["Value"] for tag in master["Tags"]}
    assert tags["graviton.llama_rpc/iam"] == f"role:{IDLE_STOP_ROLE} policy:{WAKE_POLICY}"


def test_teardown_removes_the_cluster_and_spares_the_decoys():
    preview = playbook("teardown.yml", BASE, "--check")
    assert preview.returncode == 0 and "instances: i-" in preview.stdout, preview.stdout[-3000:]
    assert len(instances()) == 3, "check mode deleted something"
    run = playbook("teardown.yml", BASE)
    assert run.returncode == 0, run.stdout[-3000:]
    client = ec2()
    assert instances(states=("pending", "running", "stopping", "stopped")) == []
    assert groups() == {}
    assert client.describe_vpcs(Filters=cluster_filter())["Vpcs"] == []
    assert client.describe_subnets(Filters=cluster_filter())["Subnets"] == []
    assert client.describe_internet_gateways(Filters=cluster_filter())["InternetGateways"] == []
    assert client.describe_route_tables(Filters=cluster_filter())["RouteTables"] == []
    assert client.describe_placement_groups(Filters=[{"Name": "group-name", "Values": [CLUSTER]}])["PlacementGroups"] == []
    assert IDLE_STOP_ROLE not in [role["RoleName"] for role in iam().list_roles()["Roles"]]
    assert IDLE_STOP_ROLE not in [profile["InstanceProfileName"] for profile in iam().list_instance_profiles()["InstanceProfiles"]]
    assert WAKE_POLICY not in [policy["PolicyName"] for policy in iam().list_policies(Scope="Local")["Policies"]]
    decoy = [{"Name": "tag:purpose", "Values": ["decoy"]}]
    assert len(client.describe_vpcs(Filters=decoy)["Vpcs"]) == 1
    assert len(client.describe_security_groups(Filters=decoy)["SecurityGroups"]) == 1
    running = [i for r in client.describe_instances(Filters=decoy + [{"Name": "instance-state-name", "Values": ["running"]}])["Reservations"]
               for i in r["Instances"]]
    assert len(running) == 1
