# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Graviton4 compute-optimised instance types the collection sizes clusters with: memory and price.

Memory: Amazon EC2 C8g instances, https://aws.amazon.com/ec2/instance-types/c8g/ (2 GiB per vCPU).
Price: on-demand USD per hour, Linux, us-east-1, as AWS listed them when C8g launched (September 2024;
https://aws.amazon.com/ec2/pricing/on-demand/). Other regions cost more: check before relying on it.
What else a cluster is billed for (volumes, addresses, a NAT gateway), and the sum: cluster_bill.py.
Read for this table: 2026-11. One place: aws_infra reads it through the graviton_types lookup and the cluster_cost
filter (cluster_bill.py), gguf_plan directly.
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


def table():
    return [{"name": name, "memory_gib": memory, "usd_per_hour": price} for name, memory, price in C8G]


def smallest_holding(need_bytes, fraction):
    """The smallest type whose memory, at most `fraction` of it used, holds need_bytes; None when none does."""
    for name, memory, price in C8G:
        if need_bytes <= memory * GIB * fraction:
            return {"name": name, "memory_gib": memory, "usd_per_hour": price}
    return None
