# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: rpc_limits
short_description: The limits of llama.cpp's RPC backend that the collection checks
version_added: 0.1.0
description:
  - Returns the value of each limit named, as the collection's modules and filters check it
    (C(plugins/module_utils/llama_cpp/rpc_protocol.py) holds each value once), so that roles check the same number.
options:
  _terms:
    description:
      - The limits. V(max_workers) is the most RPC workers one master uses (llama.cpp's GGML_RPC_MAX_SERVERS).
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Check the number of workers
  ansible.builtin.assert:
    that: groups['llama_workers'] | length <= query('graviton.llama_rpc.rpc_limits', 'max_workers') | first
"""

RETURN = r"""
_raw:
  description: The value of each limit, in the order named.
  type: list
  elements: int
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp.rpc_protocol import MAX_WORKERS

LIMITS = {"max_workers": MAX_WORKERS}


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        unknown = [term for term in terms if term not in LIMITS]
        if unknown:
            raise AnsibleLookupError("unknown limit %s; rpc_limits knows %s"
                                     % (", ".join(map(str, unknown)), ", ".join(sorted(LIMITS))))
        return [LIMITS[term] for term in terms]
