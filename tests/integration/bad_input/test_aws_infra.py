"""Bad input to aws_infra (playbooks/provision.yml) against moto's server on loopback: each input is refused by name,
before anything is created (the account's counts of every kind of resource are as they were). The account is seeded
as a user's would be: the key pair, and a VPC named like a cluster that this collection did not create."""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import pytest

from tests.integration.bad_input import assert_refused
from tests.tools import llama_cpp, moto_aws

ROOT = Path(__file__).resolve().parents[3]
REGION = "us-east-1"
BASE = {"aws_infra_region": REGION, "aws_infra_cluster_name": "bad-input", "aws_infra_admin_cidr": "198.51.100.7/32",
        "aws_infra_key_name": "molecule-key", "aws_infra_wait_for_ssh": False, "aws_infra_placement_group_managed": False,
        "aws_infra_rpc_port": 50099}


@pytest.fixture(scope="module")
def aws():
    """moto on a free port, seeded; yields (environment for ansible-playbook, EC2 client)."""
    with moto_aws.running(llama_cpp.free_port()) as endpoint:
        env = dict(os.environ, AWS_URL=endpoint, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                   AWS_DEFAULT_REGION=REGION, ANSIBLE_INJECT_FACT_VARS="False")
        ec2 = boto3.client("ec2", endpoint_url=endpoint, region_name=REGION, aws_access_key_id="testing",
                           aws_secret_access_key="testing")
        ec2.create_key_pair(KeyName="molecule-key")
        decoy = ec2.create_vpc(CidrBlock="10.99.0.0/16")["Vpc"]["VpcId"]
        ec2.create_tags(Resources=[decoy], Tags=[{"Key": "Name", "Value": "decoy"}])
        yield env, ec2


def playbook(aws, extra, *args, env=None, name="provision.yml"):
    # The controller's own Python for localhost (interpreter discovery could pick another one).
    extra = dict(extra, ansible_python_interpreter=sys.executable)
    return subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(ROOT / "playbooks" / name),
                           "-e", json.dumps(extra), *args], capture_output=True, text=True, env=env or aws[0],
                          timeout=900, check=False)


# Every input rule, case by case, is a unit test (tests/unit/plugins/module_utils/input_rules/); these are what
# only AWS answers (the region's types, the key pair, the VPC, a name taken), and two rules end to end.
BAD = {
    "region without the instance type": ({"aws_infra_region": "me-south-1"}, "c8g.4xlarge is not offered in me-south-1"),
    "x86 type": ({"aws_infra_instance_type": "c7i.4xlarge"}, "c7i.4xlarge is x86_64, not arm64"),
    "no admin CIDR": ({"aws_infra_admin_cidr": ""}, "aws_infra_admin_cidr is empty: set it to the addresses that may reach SSH"),
    "key pair missing in the region": ({"aws_infra_key_name": "no-such-key"},
                                       "aws_infra_key_name=no-such-key: no EC2 key pair of that name in us-east-1"),
    "VPC that does not exist": ({"aws_infra_vpc_id": "vpc-0123456789abcdef0", "aws_infra_subnet_id": "subnet-0123456789abcdef0"},
                                "No subnet subnet-0123456789abcdef0 in VPC vpc-0123456789abcdef0"),
    "name of a VPC this collection did not create": ({"aws_infra_cluster_name": "decoy"}, "was not created for this cluster"),
    "octet above 255": ({"aws_infra_admin_cidr": "300.51.100.7/32"},
                        "aws_infra_admin_cidr='300.51.100.7/32' is not an IP network: Octet 300 (> 255) not permitted"),
}


def refused_side_by_side(aws, cases):
    """Runs each case's provision.yml at once (each is refused before it creates anything); asserts each failed with
    its message, and that the account is as it was around all of them."""
    before = moto_aws.account_counts(aws[1])
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = dict(zip(cases, pool.map(lambda case: playbook(aws, dict(BASE, **cases[case][0])), cases)))
    untouched = moto_aws.account_counts(aws[1]) == before
    for case, (_overrides, message) in cases.items():
        assert_refused(case, runs[case], [message], untouched)


def test_bad_input_is_refused_before_anything_is_created(aws):
    refused_side_by_side(aws, BAD)


def test_a_refusal_names_only_the_wrong_inputs_in_the_order_they_are_set(aws):
    run = playbook(aws, dict(BASE, aws_infra_admin_cidr="198.51.100.7", aws_infra_private_subnet_cidr="10.50.1.0/24",
                             aws_infra_worker_count=20))
    assert run.returncode != 0
    wrong = ["aws_infra_admin_cidr='198.51.100.7' is not an IP network", "aws_infra_private_subnet_cidr=10.50.1.0/24 is not inside",
             "aws_infra_worker_count=20: set aws_infra_worker_count from 1 to 16"]
    output = run.stdout + run.stderr  # ansible-core 2.19 prints the failure on stderr
    where = [output.find(message) for message in wrong]
    assert -1 not in where and where == sorted(where), (where, output[-3000:])
    for good in ("aws_infra_region is", "aws_infra_cluster_name=", "aws_infra_key_name is", "aws_infra_vpc_cidr='",
                 "aws_infra_public_subnet_cidr=", "aws_infra_rpc_port=", "aws_infra_vpc_id and"):
        assert good not in output, (good, output[-3000:])


def test_no_credentials_is_refused_with_what_to_set(aws):
    env = {key: value for key, value in aws[0].items() if not key.startswith("AWS_") or key == "AWS_URL"}
    env.update(AWS_SHARED_CREDENTIALS_FILE="/nonexistent", AWS_CONFIG_FILE="/nonexistent")
    run = playbook(aws, BASE, env=env)
    output = run.stdout + run.stderr
    assert run.returncode != 0 and "No usable AWS credentials" in output and "AWS_PROFILE" in output


def test_teardown_of_a_name_provisioning_refuses_is_refused_by_name_and_deletes_nothing(aws):
    """teardown.yml asks the same rule as provisioning (a unit test compares the two); here, that the role calls it
    before any AWS call: the account keeps every resource, the decoy VPC among them."""
    before = moto_aws.account_counts(aws[1])
    run = playbook(aws, {"aws_infra_region": REGION, "aws_infra_cluster_name": "Decoy"}, name="teardown.yml")
    assert_refused("teardown of 'Decoy'", run, ["aws_infra_cluster_name='Decoy': use 3 to 32 lowercase letters"],
                   moto_aws.account_counts(aws[1]) == before)
