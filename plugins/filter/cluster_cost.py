# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: cluster_cost
short_description: What a cluster costs on AWS, line by line, running (per hour) and stopped
version_added: 0.2.0
description:
  - Takes the cluster's instance types (one per instance), its gp3 volumes, its public IPv4 addresses and its NAT
    gateways, and gives what each costs on demand in us-east-1 while the cluster runs and while it is stopped (a stopped
    EBS-backed instance is not charged; its volumes, and a NAT gateway with its Elastic IP, are), with what keeps billing
    while stopped in words, and how to stop it.
  - The prices and their sources are in C(plugins/module_utils/aws/cluster_bill.py) and C(instance_types.py), the one
    place the collection keeps them.
options:
  _input:
    description: The instance types, one per instance (C(c8g.4xlarge) ...).
    type: list
    elements: str
    required: true
  volumes:
    description:
      - The volumes, each C(size) (GB), C(iops), C(throughput) (MiB/s), C(tags) and C(id), as amazon.aws.ec2_vol_info
        gives them. A volume whose IOPS or throughput AWS did not report is priced at gp3's baseline and named in
        C(unreported).
    type: list
    elements: dict
    default: []
  public_ipv4:
    description: The public IPv4 addresses the cluster's instances have while they run (not Elastic IPs).
    type: int
    default: 0
  nat_gateways:
    description: The cluster's NAT gateways, each with its Elastic IP.
    type: int
    default: 0
  running_now:
    description:
      - Whether the cluster runs now. The volumes are as they are now; the other state's figure is what a stop
        (lowering them, with O(lowered_when_stopped)) or a start (restoring what their tag noted) makes of them.
    type: bool
    default: true
  lowered_when_stopped:
    description: A stop lowers the volumes to gp3's baseline (C(aws_infra_stopped_volumes_baseline)).
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: What the cluster costs
  ansible.builtin.debug:
    msg: >-
      {{ (['c8g.8xlarge', 'c8g.4xlarge', 'c8g.4xlarge'] | graviton.llama_rpc.cluster_cost(volumes=volumes.volumes,
          public_ipv4=1)).running_usd_hour }}
"""

RETURN = r"""
_value:
  description:
    - C(running_usd_hour), C(stopped_usd_hour), C(stopped_usd_month), C(stopped_share) (of the running hour);
      C(running_lines) and C(stopped_lines), each C(item), C(usd_hour), C(source); C(stopped_bills), what keeps billing
      while stopped in words with how to stop it; C(unpriced) (types with no price on record, left out of the figures)
      and C(unreported) (volumes AWS gave no IOPS or throughput for).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.graviton.llama_rpc.plugins.module_utils.aws.cluster_bill import cluster_bill


def cluster_cost(instance_types, volumes=None, public_ipv4=0, nat_gateways=0, running_now=True,
                 lowered_when_stopped=True):
    if not isinstance(instance_types, list) or not all(isinstance(kind, str) for kind in instance_types):
        raise AnsibleFilterError("cluster_cost needs a list of instance types, got %r" % (instance_types,))
    return cluster_bill(instance_types, [volume for volume in volumes or [] if isinstance(volume, dict)],
                        public_ipv4=int(public_ipv4), nat_gateways=int(nat_gateways), running_now=bool(running_now),
                        lowered_when_stopped=bool(lowered_when_stopped))


class FilterModule:
    def filters(self):
        return {"cluster_cost": cluster_cost}
