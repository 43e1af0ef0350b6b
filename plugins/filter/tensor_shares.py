# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: tensor_shares
short_description: Which of a model's hashed tensors each RPC worker receives under a fit plan
version_added: 0.1.0
description:
  - Takes the tensors M(graviton.llama_rpc.gguf_tensor_hashes) returns and a plan from M(graviton.llama_rpc.gguf_plan),
    and gives, per worker endpoint, the tensors llama.cpp will send it (the layers the plan puts there, and the output
    head on the worker that holds it). Tensors the master keeps are in no list.
options:
  _input:
    description: The tensors (C(name), C(layer), C(hash), C(offset), C(size)).
    type: list
    elements: dict
    required: true
  plan:
    description: The plan (its C(workers), each C(name), C(layers) and C(output)).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: What each worker's cache must hold
  ansible.builtin.set_fact:
    shares: "{{ hashes.tensors | graviton.llama_rpc.tensor_shares(plan.plan) }}"
"""

RETURN = r"""
_value:
  description: Endpoint -> the tensors it receives.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp.tensor_cache import PlanMismatch, assign


def tensor_shares(tensors, plan):
    if not isinstance(plan, dict) or not isinstance(plan.get("workers"), list):
        raise AnsibleFilterError("tensor_shares needs a gguf_plan plan (with its workers); got %r" % (plan,))
    try:
        return assign(tensors, plan)
    except PlanMismatch as error:
        raise AnsibleFilterError(str(error))


class FilterModule:
    def filters(self):
        return {"tensor_shares": tensor_shares}
