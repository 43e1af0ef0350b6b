"""The input rules of aws_infra (module_utils/input_rules/aws_infra.py), case by case: each bad setting is refused with a
sentence that names it and the fix, only the wrong ones are named, and the role's own defaults pass.
What only AWS knows, such as the key pair and the region's types, is the account's."""

import pytest
from ansible_collections.graviton.llama_rpc.plugins.filter.input_problems import input_problems
from tests.unit.plugins.module_utils.input_rules.rules import refusals, check

AWS = {"aws_infra_region": "us-east-1", "aws_infra_cluster_name": "bad-input", "aws_infra_admin_cidr": "198.51.100.7/32",
       "aws_infra_key_name": "molecule-key", "aws_infra_rpc_port": 50099, "max_workers": 16}

# Each address input, parsed: these all passed the old pattern (or were never checked) and reached AWS, which
# rewrote them into other networks or failed after the VPC existed. Each message names the variable and the fix.
AWS_CASES = {
    "octet above 255": ({"aws_infra_admin_cidr": "300.51.100.7/32"},
                        "aws_infra_admin_cidr='300.51.100.7/32' is not an IP network: Octet 300 (> 255) not permitted"),
    "prefix above 32": ({"aws_infra_admin_cidr": "198.51.100.7/33"}, "an IPv4 prefix length is 0 to 32"),
    "host bits set": ({"aws_infra_admin_cidr": "198.51.100.7/24"},
                      "for this address alone write 198.51.100.7/32, for the whole network 198.51.100.0/24"),
    "no prefix": ({"aws_infra_admin_cidr": "198.51.100.7"}, "for this address alone write 198.51.100.7/32"),
    "IPv6 admin network": ({"aws_infra_admin_cidr": "2001:db8::/64"}, "aws_infra_admin_cidr='2001:db8::/64' is IPv6; the VPC has IPv4 only"),
    "VPC block too large": ({"aws_infra_vpc_cidr": "10.0.0.0/8"}, "aws_infra_vpc_cidr='10.0.0.0/8': a VPC takes an IPv4 block from /16 to /28"),
    "VPC with host bits": ({"aws_infra_vpc_cidr": "10.42.0.1/16"}, "aws_infra_vpc_cidr='10.42.0.1/16' is not an IP network"),
    "subnet outside the VPC": ({"aws_infra_public_subnet_cidr": "10.43.0.0/24"},
                               "aws_infra_public_subnet_cidr=10.43.0.0/24 is not inside aws_infra_vpc_cidr=10.42.0.0/16"),
    "public source for llama-server": ({"aws_infra_server_allowed_sources": ["10.42.0.0/16", "52.94.0.0/16"]},
                                       "aws_infra_server_allowed_sources entry '52.94.0.0/16' is public; llama-server "
                                       "speaks plain HTTP"),
    "llama-server open to the world": ({"aws_infra_server_allowed_sources": ["0.0.0.0/0"]},
                                       "aws_infra_server_allowed_sources entry '0.0.0.0/0' is public"),
    "server port on the RPC port": ({"aws_infra_server_port": 50099},
                                    "aws_infra_server_port=50099: set it from 1 to 65535, other than SSH (22) and the RPC port."),
    "overlapping subnets": ({"aws_infra_private_subnet_cidr": "10.42.0.0/25"},
                            "aws_infra_private_subnet_cidr=10.42.0.0/25 overlaps aws_infra_public_subnet_cidr=10.42.0.0/24"),
    "no workers": ({"aws_infra_worker_count": 0}, "aws_infra_worker_count from 1 to 16"),
    "17 workers": ({"aws_infra_worker_count": 17}, "aws_infra_worker_count from 1 to 16"),
    "SSH from anywhere without the opt-in": ({"aws_infra_admin_cidr": "0.0.0.0/0"}, "aws_infra_ssh_from_anywhere: true"),
    "no admin CIDR": ({"aws_infra_admin_cidr": ""}, "aws_infra_admin_cidr is empty: set it to the addresses that may reach SSH"),
    "volume throughput above gp3's": ({"aws_infra_volume_throughput_mib_s": 2001, "aws_infra_volume_iops": 16000},
                                      "aws_infra_volume_throughput_mib_s=2001: gp3 takes 125 to 2000."),
    "a region that is not one": ({"aws_infra_region": "mars-1"},
                                 "aws_infra_region='mars-1' is not an AWS region: the controller's botocore"),
    "a region misspelt": ({"aws_infra_region": "eu-west-l"}, "(the nearest: eu-west-1, "),
    "extra regions that are no list": ({"aws_infra_regions_extra": "eu-south-3"},
                                       "aws_infra_regions_extra='eu-south-3': give a list of region names"),
    "IAM names over 64 characters": ({"aws_infra_idle_stop": True, "aws_infra_region": "us-east-1-" + "x" * 30,
                                      "aws_infra_regions_extra": ["us-east-1-" + "x" * 30]},
                                     "the IAM names made for cluster bad-input (llama-rpc-<cluster>-<region>-stop) would "
                                     "be 65 characters, over IAM's 64"),
    "IOPS above gp3's": ({"aws_infra_volume_iops": 20000}, "aws_infra_volume_iops=20000: gp3 takes 3000 to 16000."),
    "throughput the IOPS cannot carry": ({"aws_infra_volume_throughput_mib_s": 1000, "aws_infra_volume_iops": 3000},
                                         "set aws_infra_volume_iops to at least 4000"),
    "no region": ({"aws_infra_region": ""}, "aws_infra_region is empty: set the region"),
    "an SSH wait of 0 s": ({"aws_infra_ssh_timeout": 0}, "aws_infra_ssh_timeout=0: set the seconds to wait for SSH"),
    "a cluster name with capitals": ({"aws_infra_cluster_name": "My-Cluster"},
                                     "aws_infra_cluster_name='My-Cluster': use 3 to 32 lowercase letters"),
    "no key pair": ({"aws_infra_key_name": ""}, "aws_infra_key_name is empty: set it to the name of an EC2 key pair in us-east-1"),
    "a VPC without its subnet": ({"aws_infra_vpc_id": "vpc-0123456789abcdef0"}, "aws_infra_vpc_id and aws_infra_subnet_id: set both"),
    "RPC port 0": ({"aws_infra_rpc_port": 0}, "aws_infra_rpc_port=0: set it from 1 to 65535."),
    "server port on SSH's": ({"aws_infra_server_port": 22}, "aws_infra_server_port=22: set it from 1 to 65535, other than SSH"),
    "exporter port on SSH's": ({"aws_infra_exporter_port": 22},
                               "aws_infra_exporter_port=22: set it from 1 to 65535, other than SSH (22) and the RPC "
                               "port, or 0 for no rule."),
}


def test_aws_infra_defaults_pass():
    assert refusals("aws_infra", AWS, {}) == []
    assert refusals("aws_infra", AWS, {"aws_infra_admin_cidr": "0.0.0.0/0", "aws_infra_ssh_from_anywhere": True,
                                       "aws_infra_server_allowed_sources": ["10.42.0.0/16", "192.168.4.0/24"],
                                       "aws_infra_vpc_id": "vpc-1", "aws_infra_subnet_id": "subnet-1",
                                       "aws_infra_volume_throughput_mib_s": 125, "aws_infra_volume_iops": 3000}) == []
    # gp3's current limit (the EC2 API reference's ModifyVolume), with the IOPS it needs
    assert refusals("aws_infra", AWS, {"aws_infra_volume_throughput_mib_s": 2000, "aws_infra_volume_iops": 8000}) == []


def test_the_iam_names_of_a_32_character_cluster_fit_in_every_region_botocore_knows():
    """IAM names carry the region (they are the account's, not a region's): with the longest cluster name the input
    rules let through, the longest is llama-rpc-<cluster>-<region>-stop, at most 64 characters (IAM's limit for a role)."""
    import botocore.session
    session = botocore.session.get_session()
    regions = {region for partition in session.get_available_partitions()
               for region in session.get_available_regions("ec2", partition)}
    assert len(regions) > 20
    longest = max(regions, key=len)
    name = "a" * 32
    assert len("llama-rpc-%s-%s-stop" % (name, longest)) <= 64, longest
    assert refusals("aws_infra", AWS, {"aws_infra_cluster_name": name, "aws_infra_region": longest,
                                       "aws_infra_idle_stop": True, "aws_infra_wake_policy": True}) == []


@pytest.mark.parametrize("case", sorted(AWS_CASES))
def test_aws_infra_bad_input_is_refused_by_name(case):
    overrides, message = AWS_CASES[case]
    assert len(check("aws_infra", AWS, overrides, [message])) == 1


def test_aws_infra_names_only_the_wrong_inputs_in_the_order_they_are_set():
    found = refusals("aws_infra", AWS, {"aws_infra_admin_cidr": "198.51.100.7", "aws_infra_private_subnet_cidr": "10.50.1.0/24",
                                        "aws_infra_worker_count": 20})
    text = " ".join(found)
    wrong = ["aws_infra_admin_cidr='198.51.100.7' is not an IP network", "aws_infra_private_subnet_cidr=10.50.1.0/24 is not inside",
             "aws_infra_worker_count=20: set aws_infra_worker_count from 1 to 16"]
    where = [text.find(message) for message in wrong]
    assert len(found) == 3 and -1 not in where and where == sorted(where), (where, text)


# aws_infra's teardown (tasks_from: teardown.yml) finds the cluster by region and name alone: provisioning's rules for
# the two, so a name provisioning would refuse is never looked for, and nothing else is asked.
TEARDOWN_CASES = {
    "no region": ({"aws_infra_region": ""}, ["aws_infra_region is empty: set the region of the cluster to delete"]),
    "no cluster name": ({"aws_infra_cluster_name": ""}, ["aws_infra_cluster_name='': use 3 to 32 lowercase letters"]),
    "a cluster name with capitals": ({"aws_infra_cluster_name": "My-Cluster"},
                                     ["aws_infra_cluster_name='My-Cluster': use 3 to 32 lowercase letters"]),
    "a cluster name ending in a dash": ({"aws_infra_cluster_name": "demo-"}, ["aws_infra_cluster_name='demo-'"]),
    "a cluster name of 33 characters": ({"aws_infra_cluster_name": "a" * 33}, ["aws_infra_cluster_name='%s'" % ("a" * 33)]),
    "neither": ({"aws_infra_region": "", "aws_infra_cluster_name": "x"},
                ["aws_infra_region is empty", "aws_infra_cluster_name='x'"]),
}


def test_aws_infra_teardown_asks_only_for_region_and_name():
    good = {"aws_infra_region": "eu-west-1", "aws_infra_cluster_name": "llama70b"}
    assert input_problems(good, "aws_infra_teardown") == []
    assert input_problems(dict(good, aws_infra_cluster_name="abc"), "aws_infra_teardown") == []
    assert input_problems(dict(good, aws_infra_cluster_name="a" * 32), "aws_infra_teardown") == []


@pytest.mark.parametrize("overrides, message", [
    ({}, None),
    ({"aws_infra_power": "started"}, None),
    ({"aws_infra_power": "running"}, "aws_infra_power='running': the word is started now, as rpc_master_power and "
                                     "rpc_worker_power say"),
    ({"aws_infra_power": "paused"}, "aws_infra_power='paused': set it to stopped or started (playbooks/stop.yml and "
                                    "start.yml do)."),
    ({"aws_infra_region": ""}, "aws_infra_region is empty: set the region of the cluster to stop or start"),
    ({"aws_infra_cluster_name": "Llama"}, "aws_infra_cluster_name='Llama': use 3 to 32 lowercase letters"),
])
def test_aws_infra_power_asks_for_region_name_and_state(overrides, message):
    settings = dict({"aws_infra_region": "eu-west-1", "aws_infra_cluster_name": "llama70b", "aws_infra_power": "stopped"},
                    **overrides)
    problems = input_problems(settings, "aws_infra_power")
    assert (problems == []) if message is None else (len(problems) == 1 and message in problems[0]), problems


@pytest.mark.parametrize("case", sorted(TEARDOWN_CASES))
def test_aws_infra_teardown_bad_input_is_refused_by_name(case):
    overrides, messages = TEARDOWN_CASES[case]
    found = input_problems(dict({"aws_infra_region": "eu-west-1", "aws_infra_cluster_name": "llama70b"}, **overrides),
                           "aws_infra_teardown")
    assert len(found) == len(messages), found
    for message in messages:
        assert message in " ".join(found), (message, found)


def test_aws_infra_teardown_and_provisioning_refuse_the_same_names():
    """One rule for the name: whatever provisioning refuses, teardown refuses, in the same words."""
    for name in ("", "ab", "My-Cluster", "9lives", "demo-", "a_b", "a" * 33, "llama70b", "a-b"):
        provision = [p for p in refusals("aws_infra", AWS, {"aws_infra_cluster_name": name}) if "cluster_name" in p]
        teardown = input_problems({"aws_infra_region": "us-east-1", "aws_infra_cluster_name": name}, "aws_infra_teardown")
        assert provision == teardown, (name, provision, teardown)


@pytest.mark.parametrize("rules, context", [("aws_infra", AWS), ("aws_infra_teardown", {"aws_infra_cluster_name": "bad-input"}),
                                            ("aws_infra_power", {"aws_infra_cluster_name": "bad-input"})])
def test_a_region_is_one_botocore_lists_or_one_the_user_adds_for_every_entry_point(rules, context):
    """mars-1 reached AWS before: a raw HTTP 500 under moto, a failure that blamed the credentials against AWS. It is
    refused before any call, in provision, stop, start and teardown alike; a region newer than the SDK is listed."""
    refused = refusals(rules, context, {"aws_infra_region": "mars-1"})
    assert len(refused) == 1 and "aws_infra_region='mars-1' is not an AWS region" in refused[0] \
        and "add its name to aws_infra_regions_extra" in refused[0], refused
    assert refusals(rules, context, {"aws_infra_region": "mars-1", "aws_infra_regions_extra": ["mars-1"]}) == []
    for region in ("eu-west-1", "us-gov-west-1", "cn-north-1", "ap-southeast-2"):  # every partition botocore knows
        assert refusals(rules, context, {"aws_infra_region": region}) == [], region
