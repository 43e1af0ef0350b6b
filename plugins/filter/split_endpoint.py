# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: split_endpoint
short_description: The address and the port of an RPC worker endpoint
version_added: 0.1.0
description:
  - Parses an endpoint of the worker list, C(host:port) or C([IPv6 address]:port), with the parser the
    collection's RPC client uses, and returns its parts. An endpoint that is not one fails, saying why.
options:
  _input:
    description: The endpoint, for example an entry of the C(worker_list) filter's result.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Connect to the first worker's RPC port
  ansible.builtin.wait_for:
    host: "{{ (workers[0] | graviton.llama_rpc.split_endpoint).host }}"
    port: "{{ (workers[0] | graviton.llama_rpc.split_endpoint).port }}"
"""

RETURN = r"""
_value:
  description: C(host) (an IPv6 address without its brackets) and C(port) (a number).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp.rpc_protocol import parse_endpoint


def split_endpoint(endpoint):
    if not isinstance(endpoint, str):
        raise AnsibleFilterError("split_endpoint expects an endpoint such as 10.0.1.11:50052, got %r" % (endpoint,))
    try:
        host, port = parse_endpoint(endpoint)
    except ValueError as error:
        raise AnsibleFilterError("split_endpoint: %s" % error)
    return {"host": host, "port": port}


class FilterModule:
    def filters(self):
        return {"split_endpoint": split_endpoint}
