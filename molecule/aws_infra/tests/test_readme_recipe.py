"""The README's 70B recipe, as written: its variables file and its commands, taken from README.md and run against
moto (provision, the shipped inventory lists the cluster, teardown). Only what moto lacks is added: no SSH answers on
its instances. The cluster is placed in a placement group someone else made (shared, aws_infra_placement_group_managed
false at provision), which the README's teardown, run as written, must leave in place: it does not carry the tag."""

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import boto3
import yaml

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
README = (ROOT / "README.md").read_text()
ENDPOINT = "http://127.0.0.1:5123"
# The user's default region is not the README's: the cluster must be found where cluster.yml put it.
ENV = dict(os.environ, AWS_URL=ENDPOINT, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
           AWS_DEFAULT_REGION="eu-west-1", ANSIBLE_INJECT_FACT_VARS="False")
MOTO_LACKS = ["-e", json.dumps({"aws_infra_wait_for_ssh": False})]
SHARED_GROUP = ["-e", json.dumps({"aws_infra_placement_group_managed": False})]


def readme_block(language, first_line):
    """The README's fenced block of that language whose first line starts so."""
    blocks = re.findall(rf"^```{language}\n(.*?)^```", README, re.M | re.S)
    found = [block for block in blocks if block.startswith(first_line)]
    assert len(found) == 1, f"README.md has {len(found)} {language} blocks starting {first_line!r}"
    return found[0]


def readme_commands(containing):
    """The README's shell lines (comments dropped) that contain a text, in the README's order."""
    lines = []
    for block in re.findall(r"^```sh\n(.*?)^```", README, re.M | re.S):
        lines += [line.split("#")[0].strip() for line in block.replace("\\\n", " ").splitlines() if containing in line]
    return lines


def run(command, cwd):
    return subprocess.run(shlex.split(command), cwd=cwd, capture_output=True, text=True, env=ENV, timeout=900,
                          check=False)


def test_the_readme_recipe_provisions_and_the_shipped_inventory_lists_the_cluster(tmp_path):
    cluster_file = readme_block("yaml", "# cluster.yml")
    (tmp_path / "cluster.yml").write_text(cluster_file)
    cluster = yaml.safe_load(cluster_file)
    region, name = cluster["aws_infra_region"], cluster["aws_infra_cluster_name"]
    ec2 = boto3.client("ec2", endpoint_url=ENDPOINT, region_name=region, aws_access_key_id="testing",
                       aws_secret_access_key="testing")
    ec2.create_key_pair(KeyName=cluster["aws_infra_key_name"])  # "an EC2 key pair in the region": the user's part

    # someone else's placement group of the cluster's name, which this cluster shares
    ec2.create_placement_group(GroupName=name, Strategy="cluster")
    [provision] = readme_commands("graviton.llama_rpc.provision")
    done = run(provision + " " + shlex.join(MOTO_LACKS + SHARED_GROUP), tmp_path)
    assert done.returncode == 0, done.stdout[-3000:]
    assert f"Cluster {name} in {region}" in done.stdout and "Running: $" in done.stdout

    [listing] = readme_commands("ansible-inventory")
    listed = run(listing, ROOT)  # the README's path is the checkout's
    assert listed.returncode == 0, listed.stderr
    section = listed.stdout.split(f"@cluster_{name}:")[1].split("@")[0] if f"@cluster_{name}:" in listed.stdout else ""
    assert section.count(f"{name}-master-i-") == 1 and section.count(f"{name}-workers-i-") == cluster["aws_infra_worker_count"], listed.stdout

    # stopped and started again, by the README's commands (moto's instances answer no SSH: the start ends at the API)
    [stop] = readme_commands("graviton.llama_rpc.stop")
    stopped = run(stop + " " + shlex.join(MOTO_LACKS), tmp_path)
    assert stopped.returncode == 0 and "a month (" in stopped.stdout, stopped.stdout[-3000:]
    [start] = readme_commands("graviton.llama_rpc.start")
    known = tmp_path / "known_hosts"
    started = run(start + " " + shlex.join(MOTO_LACKS + ["-e", f"aws_infra_known_hosts_file={known}", "--limit", "localhost"]),
                  tmp_path)
    assert started.returncode == 0 and "Running: $" in started.stdout, started.stdout[-3000:]

    [teardown] = readme_commands("graviton.llama_rpc.teardown")
    gone = run(teardown + " " + shlex.join(MOTO_LACKS), tmp_path)
    assert gone.returncode == 0, gone.stdout[-3000:]
    assert [group["GroupName"] for group in ec2.describe_placement_groups()["PlacementGroups"]] == [name]
    assert (f"{name} is left in place: it does not carry the tag graviton.llama_rpc/cluster={name}, so someone else made "
            "it") in gone.stdout, gone.stdout[-3000:]
    ec2.delete_placement_group(GroupName=name)
    left = ec2.describe_instances(Filters=[{"Name": "tag:graviton.llama_rpc/cluster", "Values": [name]},
                                           {"Name": "instance-state-name", "Values": ["pending", "running"]}])
    assert left["Reservations"] == []
