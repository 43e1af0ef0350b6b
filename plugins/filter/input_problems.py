# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: input_problems
short_description: What is wrong with a role's settings, each refusal naming its variable and the fix
version_added: 0.1.0
description:
  - The input rules of the collection's roles, in one place (module_utils/input_rules/) that the unit tests call.
    A role's pre-flight passes its settings and asserts that the answer is empty, before anything changes.
  - Returns every refusal at once, only for the settings that are wrong; an empty list when all are good.
options:
  _input:
    description: The role's variables as the user set them, and what the role resolved from the host and inventory.
    type: dict
    required: true
  role:
    description:
      - The role whose rules apply (aws_infra, llama_build, rpc_tunnel, rpc_worker, rpc_master, gateway, bench), or
        V(aws_infra_teardown) and V(aws_infra_power) for aws_infra's teardown and power entry points.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Check the benchmark settings
  ansible.builtin.assert:
    that: _problems | length == 0
    fail_msg: "{{ _problems | join(' ') }}"
    quiet: true
  vars:
    _problems: "{{ {'bench_repetitions': bench_repetitions} | graviton.llama_rpc.input_problems('bench') }}"
"""

RETURN = r"""
_value:
  description: One sentence per wrong setting, in the order of the role's rules; empty when every setting is good.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.by_role import ROLES, input_problems as _problems


def input_problems(settings, role):
    if role not in ROLES:
        raise AnsibleFilterError("input_problems: no rules for role %r (there are: %s)" % (role, ", ".join(sorted(ROLES))))
    if not isinstance(settings, dict):
        raise AnsibleFilterError("input_problems expects the settings as a dict, got %r" % (type(settings).__name__,))
    try:
        return _problems(settings, role)
    except KeyError as error:
        raise AnsibleFilterError("input_problems(%r): the role did not pass setting %s" % (role, error))


class FilterModule:
    def filters(self):
        return {"input_problems": input_problems}
