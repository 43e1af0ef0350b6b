# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: graviton_types
short_description: The Graviton instance types the collection sizes clusters with, their memory and price
version_added: 0.1.0
description:
  - Returns one entry per C8g instance type, smallest first, with its memory (GiB) and its on-demand price (USD per hour,
    Linux, us-east-1, as listed when C8g launched). C(plugins/module_utils/aws/instance_types.py) holds the table once, with
    its sources and the date it was read; M(graviton.llama_rpc.gguf_plan) reads the same table.
options: {}
"""

EXAMPLES = r"""
- name: The smallest C8g with 64 GiB or more
  ansible.builtin.debug:
    msg: "{{ query('graviton.llama_rpc.graviton_types') | selectattr('memory_gib', 'ge', 64) | map(attribute='name') | first }}"
"""

RETURN = r"""
_raw:
  description: The types, smallest first.
  type: list
  elements: dict
  contains:
    name:
      description: The instance type.
      type: str
    memory_gib:
      description: Its memory in GiB.
      type: int
    usd_per_hour:
      description: Its on-demand price in us-east-1, USD per hour.
      type: float
"""

from ansible.plugins.lookup import LookupBase

from ansible_collections.graviton.llama_rpc.plugins.module_utils.aws.instance_types import table


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        return table()
