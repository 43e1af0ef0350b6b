# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""aws_infra's input rules: its settings (as the user set them, and what the role resolved from the host and the
inventory) in, the refusals out, one sentence each naming the variable and what to write instead; [] when all are good."""

from __future__ import annotations

import re

from ansible_collections.graviton.llama_rpc.plugins.module_utils.aws.regions import region_problem
from ansible_collections.graviton.llama_rpc.plugins.module_utils.network.addresses import problems as address_problems
from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.common import whole, in_range, sentences


def _aws_cluster_identity(s, purpose):
    """The region and the name a cluster is found by in AWS (its tags), for provisioning and for teardown alike."""
    found = []
    extra = s.get("aws_infra_regions_extra") or []
    if not isinstance(extra, list) or not all(isinstance(name, str) and name for name in extra):
        found.append("aws_infra_regions_extra=%r: give a list of region names, for example [eu-south-3]." % (extra,))
        extra = []
    if not s["aws_infra_region"]:
        found.append("aws_infra_region is empty: set the region %s (for example us-east-1)." % purpose)
    else:
        found += [problem for problem in [region_problem(s["aws_infra_region"], extra)] if problem]
    if not re.fullmatch(r"[a-z][a-z0-9-]{1,30}[a-z0-9]", str(s["aws_infra_cluster_name"])):
        found.append("aws_infra_cluster_name='%s': use 3 to 32 lowercase letters, digits and dashes, starting with a "
                     "letter (it names and tags everything)." % s["aws_infra_cluster_name"])
    return found


def aws_infra_teardown(settings):
    """aws_infra's rules for its teardown (tasks_from: teardown.yml): the region and the name the cluster's resources
    are found by, and nothing else (teardown needs no network or key to delete what carries the tag)."""
    return sentences(_aws_cluster_identity(settings, "of the cluster to delete"))


def _ssh_timeout(s):
    if not in_range(s.get("aws_infra_ssh_timeout", 600), 1, 86400):
        return ["aws_infra_ssh_timeout=%s: set the seconds to wait for SSH on the master, from 1 to 86400."
                % s["aws_infra_ssh_timeout"]]
    return []


def aws_infra_power(settings):
    """aws_infra's rules for stopping and starting a cluster (tasks_from: power.yml): the region and the name its
    instances are found by, the state asked for, and how long a start waits for SSH."""
    found = _aws_cluster_identity(settings, "of the cluster to stop or start") + _ssh_timeout(settings)
    if settings["aws_infra_power"] == "running":
        found.append("aws_infra_power='running': the word is started now, as rpc_master_power and rpc_worker_power "
                     "say (playbooks/start.yml sets it).")
    elif settings["aws_infra_power"] not in ("stopped", "started"):
        found.append("aws_infra_power='%s': set it to stopped or started (playbooks/stop.yml and start.yml do)."
                     % settings["aws_infra_power"])
    return sentences(found)


def aws_infra(settings):
    """aws_infra's rules, in the order the user sets the variables (what only AWS knows, such as the key pair and the
    instance types of the region, is asked of AWS after these). Beside its variables: max_workers."""
    s = settings
    found = _aws_cluster_identity(s, "to create the cluster in")
    subnet = {"kind": "network", "version": 4, "prefix": [16, 28], "prefix_reason": "a subnet takes an IPv4 block from /16 to /28."}
    # Parsed (a pattern once let 300.1.2.3/32 through, and amazon.aws rewrote it into another /32).
    found += address_problems([
        {"name": "aws_infra_admin_cidr", "value": s["aws_infra_admin_cidr"], "kind": "network", "version": 4,
         "version_reason": "the VPC has IPv4 only: give the IPv4 address you connect from, as a.b.c.d/32.",
         "empty_fix": "set it to the addresses that may reach SSH on the master, such as your own as a.b.c.d/32."},
        {"name": "aws_infra_vpc_cidr", "value": s["aws_infra_vpc_cidr"], "kind": "network", "version": 4,
         "prefix": [16, 28], "prefix_reason": "a VPC takes an IPv4 block from /16 to /28."},
        dict(subnet, name="aws_infra_public_subnet_cidr", value=s["aws_infra_public_subnet_cidr"], within="aws_infra_vpc_cidr"),
        dict(subnet, name="aws_infra_private_subnet_cidr", value=s["aws_infra_private_subnet_cidr"],
             within="aws_infra_vpc_cidr", disjoint=["aws_infra_public_subnet_cidr"]),
        {"name": "aws_infra_server_allowed_sources", "value": s["aws_infra_server_allowed_sources"], "kind": "sources",
         "version": 4, "version_reason": "the VPC has IPv4 only.", "private": True,
         "private_reason": "llama-server speaks plain HTTP, so its API key would cross the internet in clear: admit "
                           "private networks only (a TLS-terminating load balancer's subnets in the VPC, a peered VPC, a VPN)."}])
    found += _ssh_timeout(s)
    if not s["aws_infra_key_name"]:
        found.append("aws_infra_key_name is empty: set it to the name of an EC2 key pair in %s, for SSH." % s["aws_infra_region"])
    if not in_range(s["aws_infra_worker_count"], 1, whole(s["max_workers"])):
        found.append("aws_infra_worker_count=%s: set aws_infra_worker_count from 1 to %s (llama.cpp's limit on RPC workers)."
                     % (s["aws_infra_worker_count"], s["max_workers"]))
    if bool(s["aws_infra_vpc_id"]) != bool(s["aws_infra_subnet_id"]):
        found.append("aws_infra_vpc_id and aws_infra_subnet_id: set both (an existing VPC and its subnet) or neither (a new VPC).")
    if not in_range(s["aws_infra_rpc_port"], 1, 65535):
        found.append("aws_infra_rpc_port=%s: set it from 1 to 65535." % s["aws_infra_rpc_port"])
    if not in_range(s["aws_infra_server_port"], 1, 65535) or whole(s["aws_infra_server_port"]) in (22, whole(s["aws_infra_rpc_port"])):
        found.append("aws_infra_server_port=%s: set it from 1 to 65535, other than SSH (22) and the RPC port."
                     % s["aws_infra_server_port"])
    exporter = whole(s["aws_infra_exporter_port"])
    if not in_range(s["aws_infra_exporter_port"], 0, 65535) or exporter in (22, whole(s["aws_infra_rpc_port"])):
        found.append("aws_infra_exporter_port=%s: set it from 1 to 65535, other than SSH (22) and the RPC port, or 0 for "
                     "no rule." % s["aws_infra_exporter_port"])
    # gp3's limits: the EC2 API reference's ModifyVolume and CreateVolume (Throughput 125 to 2,000 MiB/s, Iops 3,000 to
    # 16,000; docs.aws.amazon.com/AWSEC2/latest/APIReference/API_ModifyVolume.html), at most 0.25 MiB/s per IOPS
    # (docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html)
    throughput, iops = whole(s["aws_infra_volume_throughput_mib_s"]), whole(s["aws_infra_volume_iops"])
    throughput_good = throughput is not None and 125 <= throughput <= 2000
    if not throughput_good:
        found.append("aws_infra_volume_throughput_mib_s=%s: gp3 takes 125 to 2000." % s["aws_infra_volume_throughput_mib_s"])
    if iops is None or not 3000 <= iops <= 16000:
        found.append("aws_infra_volume_iops=%s: gp3 takes 3000 to 16000." % s["aws_infra_volume_iops"])
    if throughput_good and throughput > (iops or 0) * 0.25:
        found.append("gp3 carries at most 0.25 MiB/s per IOPS: for %d MiB/s set aws_infra_volume_iops to at least %d."
                     % (throughput, throughput * 4))
    # IAM names belong to the account, not a region: each made for the cluster carries the region too, and a role's
    # name takes at most 64 characters (docs.aws.amazon.com/IAM/latest/APIReference/API_CreateRole.html). A 32-character
    # cluster name fits with every region botocore knows (a unit test checks it).
    longest = len("llama-rpc-%s-%s-stop" % (s["aws_infra_cluster_name"], s["aws_infra_region"]))
    if (s["aws_infra_idle_stop"] or s["aws_infra_wake_policy"]) and longest > 64:
        found.append("aws_infra_region='%s': the IAM names made for cluster %s (llama-rpc-<cluster>-<region>-stop) would "
                     "be %d characters, over IAM's 64: check the region's name (for example eu-west-1), or shorten "
                     "aws_infra_cluster_name." % (s["aws_infra_region"], s["aws_infra_cluster_name"], longest))
    if s["aws_infra_admin_cidr"] == "0.0.0.0/0" and not s["aws_infra_ssh_from_anywhere"]:
        found.append("aws_infra_admin_cidr=0.0.0.0/0 would open SSH on the master to the whole internet. Use your own "
                     "address (for example the output of `curl -s https://checkip.amazonaws.com`/32) or, knowingly, "
                     "aws_infra_ssh_from_anywhere: true.")
    return sentences(found)
