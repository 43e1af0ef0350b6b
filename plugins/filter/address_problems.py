# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: address_problems
short_description: What is wrong with address and network inputs, each refusal naming its variable and the fix
version_added: 0.1.0
description:
  - Parses each input with Python's ipaddress (IPv4 and IPv6), never with a pattern. An address must be exactly
    one address; a network must be written address/prefix-length with no host bits set (AWS and nftables would
    otherwise quietly use another network than the one written).
  - Returns the refusals in the order the inputs are given, only for the inputs that are wrong; an empty list
    when all are good. A role's pre-flight asserts that the list is empty and prints it.
options:
  _input:
    description:
      - The inputs. Each is a dict with C(name) (the variable, as the user sets it), C(value), C(kind) (C(address),
        C(network), or C(sources), a list of addresses or networks).
      - Optional C(version) (4 or 6) with C(version_reason); C(prefix) (a network's lowest and highest prefix length)
        with C(prefix_reason); C(within) (the name of an earlier network input this one must lie inside);
        C(disjoint) (names of earlier inputs it must not overlap); C(empty_fix) (the fix when it is empty).
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Check the network inputs
  ansible.builtin.assert:
    that: _problems | length == 0
    fail_msg: "{{ _problems | join(' ') }}"
    quiet: true
  vars:
    _problems: >-
      {{ [{'name': 'vpc_cidr', 'value': vpc_cidr, 'kind': 'network', 'version': 4, 'prefix': [16, 28]},
          {'name': 'subnet_cidr', 'value': subnet_cidr, 'kind': 'network', 'within': 'vpc_cidr'}]
         | graviton.llama_rpc.address_problems }}
"""

RETURN = r"""
_value:
  description: One sentence per wrong input, in the order given; empty when every input is good.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.graviton.llama_rpc.plugins.module_utils.addresses import InputProblem, problems


def address_problems(specs):
    if not isinstance(specs, (list, tuple)) or not all(isinstance(spec, dict) and "name" in spec for spec in specs):
        raise AnsibleFilterError("address_problems expects a list of dicts with name, value and kind, got %r" % (specs,))
    try:
        return problems(specs)
    except InputProblem as error:
        raise AnsibleFilterError(str(error))


class FilterModule:
    def filters(self):
        return {"address_problems": address_problems}
