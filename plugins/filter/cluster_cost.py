# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: cluster_cost
short_description: What a cluster costs on AWS, running (per hour) and stopped (per month)
version_added: 0.2.0
description:
  - Takes the cluster's instance types (one per instance) and its gp3 volumes, and gives what it costs on demand in
    us-east-1 while it runs (its instances and its volumes, USD per hour) and while it is stopped (its volumes alone, USD
    per month, since a stopped EBS-backed instance is not charged but its volumes are).
  - The prices and their sources are in C(plugins/module_utils/aws/instance_types.py), the one place the collection keeps
    them.
options:
  _input:
    description: The instance types, one per instance (C(c8g.4xlarge) ...).
    type: list
    elements: str
    required: true
  volumes:
    description: The volumes, each C(size) (GB), C(iops) and C(throughput) (MiB/s), as amazon.aws.ec2_vol_info gives them.
    type: list
    elements: dict
    default: []
"""

EXAMPLES = r"""
- name: What the cluster costs
  ansible.builtin.debug:
    msg: "{{ (['c8g.8xlarge', 'c8g.4xlarge', 'c8g.4xlarge'] | graviton.llama_rpc.cluster_cost(volumes.volumes)).running_usd_hour }}"
"""

RETURN = r"""
_value:
  description: C(running_usd_hour), C(stopped_usd_month), C(volumes_usd_month), and C(unpriced) (types with no price on
    record, left out of the figures).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.graviton.llama_rpc.plugins.module_utils.aws.instance_types import cluster_cost as _cluster_cost


def cluster_cost(instance_types, volumes=None):
    if not isinstance(instance_types, list) or not all(isinstance(kind, str) for kind in instance_types):
        raise AnsibleFilterError("cluster_cost needs a list of instance types, got %r" % (instance_types,))
    return _cluster_cost(instance_types, [volume for volume in volumes or [] if isinstance(volume, dict)])


class FilterModule:
    def filters(self):
        return {"cluster_cost": cluster_cost}
