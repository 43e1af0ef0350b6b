# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a cluster costs on AWS, line by line: everything aws_infra makes that AWS bills, running and stopped.

Prices: on-demand, us-east-1 (other regions cost more: check before relying on them).
- Instances: the C8g table in instance_types.py (https://aws.amazon.com/ec2/pricing/on-demand/). A stopped EBS-backed
  instance bills no instance-hour (EC2 StopInstances).
- gp3 volumes (https://aws.amazon.com/ebs/pricing/): storage per GB-month, and what is provisioned beyond the 3,000 IOPS
  and 125 MiB/s gp3 includes, per IOPS-month and per MiB/s-month; billed while the volume exists, its instance running
  or not.
- Public IPv4 (https://aws.amazon.com/vpc/pricing/, "Public IPv4 Address" tab): every public IPv4 address, per hour,
  since February 2024. The master's is an auto-assigned one: released at a stop (not billed), a new one at a start.
- NAT gateway (https://aws.amazon.com/vpc/pricing/, "NAT Gateway" tab): per hour from its creation to its deletion,
  plus per GB it carries, and its Elastic IP as a public IPv4 address: both bill whether the cluster runs or not.
Everything else aws_infra makes (VPC, subnets, route tables, internet gateway, security groups, placement group, IAM
roles and policies) has no charge of its own (the same pages).
"""

from __future__ import annotations

from ansible_collections.graviton.llama_rpc.plugins.module_utils.aws.instance_types import C8G

HOURS_PER_MONTH = 730  # AWS's own figure for a month in its prices

GP3_USD_PER_GB_MONTH = 0.08
GP3_USD_PER_IOPS_MONTH = 0.005  # over 3,000
GP3_USD_PER_MIB_S_MONTH = 0.040  # over 125 MiB/s
GP3_INCLUDED_IOPS, GP3_INCLUDED_MIB_S = 3000, 125
PUBLIC_IPV4_USD_HOUR = 0.005
NAT_GATEWAY_USD_HOUR = 0.045
NAT_GATEWAY_USD_PER_GB = 0.045

EC2_PRICES = "https://aws.amazon.com/ec2/pricing/on-demand/"
EBS_PRICES = "https://aws.amazon.com/ebs/pricing/"
VPC_PRICES = "https://aws.amazon.com/vpc/pricing/"

PROVISIONED_TAG = "graviton.llama_rpc/provisioned"  # "<iops>/<MiB/s>": what a volume lowered at a stop had


def provisioned_from_tag(value):
    """(iops, MiB/s) a lowered volume had, from its tag; None when the tag is not one the collection wrote."""
    try:
        iops, throughput = (int(part) for part in str(value).split("/"))
    except ValueError:
        return None
    return (iops, throughput) if iops >= GP3_INCLUDED_IOPS and throughput >= GP3_INCLUDED_MIB_S else None


def volume_usd_month(size_gb, iops=GP3_INCLUDED_IOPS, throughput_mib_s=GP3_INCLUDED_MIB_S):
    """A gp3 volume's price per month: its storage and what is provisioned beyond what gp3 includes."""
    return (size_gb * GP3_USD_PER_GB_MONTH + max(0, iops - GP3_INCLUDED_IOPS) * GP3_USD_PER_IOPS_MONTH
            + max(0, throughput_mib_s - GP3_INCLUDED_MIB_S) * GP3_USD_PER_MIB_S_MONTH)


def _volume_states(volume, running_now, lowered_when_stopped):
    """(iops, MiB/s) of one volume while the cluster runs and while it is stopped, from what it is now: a running
    cluster's volumes are lowered at its stop (when asked), a stopped one's are restored at its start (their tag)."""
    now = (volume.get("iops") or GP3_INCLUDED_IOPS, volume.get("throughput") or GP3_INCLUDED_MIB_S)
    if running_now:
        return now, (GP3_INCLUDED_IOPS, GP3_INCLUDED_MIB_S) if lowered_when_stopped else now
    had = provisioned_from_tag((volume.get("tags") or {}).get(PROVISIONED_TAG))
    return had or now, now


def _money(value):
    return "$%.3f" % value if value < 1 else "$%.2f" % value


def cluster_bill(instance_types, volumes, public_ipv4=0, nat_gateways=0, running_now=True, lowered_when_stopped=True):
    """What a cluster costs, running and stopped.

    instance_types: one per instance. volumes: each {size (GB), iops, throughput (MiB/s), tags, id} as
    amazon.aws.ec2_vol_info gives them. public_ipv4: the auto-assigned public addresses the cluster has while it runs
    (the master's). nat_gateways: the cluster's NAT gateways (each with its Elastic IP). running_now: whether the
    cluster runs now (the volumes are as they are now; the other state's figure is what a stop or start makes of them).
    lowered_when_stopped: a stop lowers the volumes to gp3's baseline (aws_infra_stopped_volumes_baseline).

    Returns {"running_usd_hour", "stopped_usd_hour", "stopped_usd_month", "stopped_share" (of the running hour),
    "running_lines", "stopped_lines" (each {"item", "usd_hour", "source", "text"}), "stopped_bills" (what keeps billing while
    stopped, in words, with how to stop it), "unpriced" (types with no price on record, left out), "unreported" (volumes
    whose IOPS or throughput AWS did not report, priced at gp3's baseline)}."""
    prices = {name: price for name, _memory, price in C8G}
    kinds = sorted(set(instance_types), key=lambda kind: (-prices.get(kind, 0.0), kind))
    instances_line = {"item": "%d instances (%s)" % (len(instance_types), ", ".join(
        "%d x %s" % (instance_types.count(kind), kind) if instance_types.count(kind) > 1 else kind for kind in kinds)),
        "usd_hour": sum(prices.get(kind, 0.0) for kind in instance_types), "source": EC2_PRICES}
    size = sum(volume.get("size") or 0 for volume in volumes)
    states = [_volume_states(volume, running_now, lowered_when_stopped) for volume in volumes]
    storage = size * GP3_USD_PER_GB_MONTH / HOURS_PER_MONTH

    def performance(which):
        return sum(volume_usd_month(0, *state[which]) for state in states) / HOURS_PER_MONTH

    def performance_words(which):
        shown = sorted({"%d IOPS and %d MiB/s" % state[which] for state in states})
        return " / ".join(shown) or "none"

    volume_lines = [
        {"item": "volumes' storage (%d GB of gp3)" % size, "usd_hour": storage, "source": EBS_PRICES},
        {"item": "volumes' performance beyond gp3's baseline (%s)" % performance_words(0), "usd_hour": performance(0),
         "source": EBS_PRICES}]
    stopped_performance = {"item": "volumes' performance beyond gp3's baseline (%s)" % performance_words(1),
                           "usd_hour": performance(1), "source": EBS_PRICES}
    nat_line = {"item": "%d NAT gateway(s) and their Elastic IPs" % nat_gateways,
                "usd_hour": nat_gateways * (NAT_GATEWAY_USD_HOUR + PUBLIC_IPV4_USD_HOUR), "source": VPC_PRICES}
    running_lines = [instances_line] + volume_lines + [
        {"item": "%d public IPv4 address(es)" % public_ipv4, "usd_hour": public_ipv4 * PUBLIC_IPV4_USD_HOUR,
         "source": VPC_PRICES}] + ([nat_line] if nat_gateways else [])
    stopped_lines = [volume_lines[0], stopped_performance] + ([nat_line] if nat_gateways else [])
    for line in running_lines + stopped_lines:
        line["text"] = "%s %s" % (line["item"], _money(line["usd_hour"]))
    running = sum(line["usd_hour"] for line in running_lines)
    stopped = sum(line["usd_hour"] for line in stopped_lines)

    bills = ["the volumes' storage (%s a month) until playbooks/teardown.yml deletes them" % _money(storage * HOURS_PER_MONTH)]
    if stopped_performance["usd_hour"] > 0:
        bills.append("their performance beyond gp3's baseline (%s a month): %s" % (
            _money(stopped_performance["usd_hour"] * HOURS_PER_MONTH),
            "a stop lowers it with aws_infra_stopped_volumes_baseline: true" if not lowered_when_stopped
            else "AWS did not let this stop lower it (said above); the next stop tries again"))
    if nat_gateways:
        bills.append("the NAT gateway and its Elastic IP (%s an hour, plus $%.3f per GB it carries), whether the "
                     "cluster runs or not: set aws_infra_nat_gateway: false and run playbooks/provision.yml again to "
                     "delete them (the roles need no route out)" % (_money(nat_line["usd_hour"]), NAT_GATEWAY_USD_PER_GB))
    return {"running_usd_hour": running, "stopped_usd_hour": stopped, "stopped_usd_month": stopped * HOURS_PER_MONTH,
            "stopped_share": stopped / running if running else 0.0,
            "running_lines": running_lines, "stopped_lines": stopped_lines, "stopped_bills": bills,
            "unpriced": sorted({kind for kind in instance_types if kind not in prices}),
            "unreported": sorted(volume.get("id") or "?" for volume in volumes
                                 if volume.get("iops") is None or volume.get("throughput") is None)}
