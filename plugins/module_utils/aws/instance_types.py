# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Graviton4 compute-optimised instance types the collection sizes clusters with: memory and price.

Memory: Amazon EC2 C8g instances, https://aws.amazon.com/ec2/instance-types/c8g/ (2 GiB per vCPU).
Price: on-demand USD per hour, Linux, us-east-1, as AWS listed them when C8g launched (September 2024;
https://aws.amazon.com/ec2/pricing/on-demand/). Other regions cost more: check before relying on it.
Volumes: gp3 in us-east-1, https://aws.amazon.com/ebs/pricing/: storage per GB-month, and what is provisioned beyond
gp3's included 3,000 IOPS and 125 MiB/s, per IOPS-month and per MiB/s-month. A stopped instance costs its volumes only
(EC2 StopInstances: no instance-hour charge while stopped, the EBS volumes kept and billed).
Read for this table: 2026-11. One place: aws_infra reads it through the graviton_types lookup and the cluster_cost
filter, gguf_plan directly.
"""

from __future__ import annotations

GIB = 1 << 30

# name, memory (GiB), on-demand USD per hour; smallest first.
C8G = (
    ("c8g.medium", 2, 0.03988),
    ("c8g.large", 4, 0.07976),
    ("c8g.xlarge", 8, 0.15952),
    ("c8g.2xlarge", 16, 0.31904),
    ("c8g.4xlarge", 32, 0.63808),
    ("c8g.8xlarge", 64, 1.27616),
    ("c8g.12xlarge", 96, 1.91424),
    ("c8g.16xlarge", 128, 2.55232),
    ("c8g.24xlarge", 192, 3.82848),
    ("c8g.48xlarge", 384, 7.65696),
)


GP3_USD_PER_GB_MONTH = 0.08
GP3_USD_PER_IOPS_MONTH = 0.005  # over 3,000
GP3_USD_PER_MIB_S_MONTH = 0.040  # over 125 MiB/s
GP3_INCLUDED_IOPS, GP3_INCLUDED_MIB_S = 3000, 125
HOURS_PER_MONTH = 730  # AWS's own figure for a month in its prices


def table():
    return [{"name": name, "memory_gib": memory, "usd_per_hour": price} for name, memory, price in C8G]


def smallest_holding(need_bytes, fraction):
    """The smallest type whose memory, at most `fraction` of it used, holds need_bytes; None when none does."""
    for name, memory, price in C8G:
        if need_bytes <= memory * GIB * fraction:
            return {"name": name, "memory_gib": memory, "usd_per_hour": price}
    return None


def volume_usd_month(size_gb, iops=GP3_INCLUDED_IOPS, throughput_mib_s=GP3_INCLUDED_MIB_S):
    """A gp3 volume's price per month: its storage and what is provisioned beyond what gp3 includes."""
    return (size_gb * GP3_USD_PER_GB_MONTH + max(0, iops - GP3_INCLUDED_IOPS) * GP3_USD_PER_IOPS_MONTH
            + max(0, throughput_mib_s - GP3_INCLUDED_MIB_S) * GP3_USD_PER_MIB_S_MONTH)


def cluster_cost(instance_types, volumes):
    """What a cluster costs: instance_types, one per instance; volumes, each {size, iops, throughput} (gp3). Returns
    {"running_usd_hour": instances and volumes, "stopped_usd_month": the volumes alone, "volumes_usd_month",
    "unpriced": the types the table has no price for (left out of the figures)}."""
    prices = {name: price for name, _memory, price in C8G}
    volumes_month = sum(volume_usd_month(volume.get("size") or 0, volume.get("iops") or GP3_INCLUDED_IOPS,
                                         volume.get("throughput") or GP3_INCLUDED_MIB_S) for volume in volumes)
    return {"running_usd_hour": sum(prices.get(kind, 0.0) for kind in instance_types) + volumes_month / HOURS_PER_MONTH,
            "stopped_usd_month": volumes_month, "volumes_usd_month": volumes_month,
            "unpriced": sorted({kind for kind in instance_types if kind not in prices})}
