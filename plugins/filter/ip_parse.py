# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: ip_parse
short_description: An IP address or network, parsed
version_added: 0.1.0
description:
  - Parses an address (C(10.0.0.5), C(fd00::5)) or a network without host bits (C(10.0.0.0/24)) with Python's
    ipaddress and returns what the roles need to know about it, instead of guessing from its characters.
  - A value that is neither fails, saying why; the roles check their inputs first (plugins/module_utils/network/addresses.py).
options:
  _input:
    description: The address or network.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Allow the master's IPv4 addresses only
  ansible.builtin.set_fact:
    ipv4_sources: "{{ sources | map('graviton.llama_rpc.ip_parse') | selectattr('version', 'eq', 4) | map(attribute='text') }}"

- name: An endpoint for an address of either family
  ansible.builtin.set_fact:
    endpoint: "{{ (address | graviton.llama_rpc.ip_parse).url_host }}:50052"
"""

RETURN = r"""
_value:
  description:
    - C(text), the canonical form; C(version), 4 or 6; C(network), whether it is a network of more than one address;
      C(unspecified) (C(0.0.0.0), C(::)); C(loopback); C(url_host), the form before C(:port) (IPv6 in brackets);
      C(cidr), the value as a network in CIDR form (one address as its /32 or /128).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from jinja2.runtime import Undefined

from ansible_collections.graviton.llama_rpc.plugins.module_utils.network.addresses import describe


def ip_parse(value):
    if isinstance(value, Undefined):  # ansible-core 2.17 and 2.18 pass a missing variable in: Ansible names it
        return value
    if not isinstance(value, str):
        raise AnsibleFilterError("ip_parse expects an IP address or network as a string, got %r" % (value,))
    try:
        return describe(value)
    except ValueError as error:
        raise AnsibleFilterError("ip_parse: %r is not an IP address or network: %s" % (value, error))


class FilterModule:
    def filters(self):
        return {"ip_parse": ip_parse}
