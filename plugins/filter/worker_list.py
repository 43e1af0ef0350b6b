# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: worker_list
short_description: The llama.cpp worker list (host:port,...) of a cluster, from the inventory
version_added: 0.1.0
description:
  - Turns the worker hosts into the C(--rpc) list llama.cpp expects, in the order given (the inventory's),
    without duplicates, 1 to 16 entries (llama.cpp's GGML_RPC_MAX_SERVERS).
  - Per host, the endpoints the rpc_worker role published (fact C(rpc_worker_endpoints)) when it ran in
    this play; otherwise the host's private address (C(rpc_worker_bind_address), else the address of its
    default-route interface from its facts, else C(ansible_host)) and the ports of its
    C(rpc_worker_instances), else C(rpc_worker_port), else 50052.
  - IPv6 addresses are written in brackets.
options:
  _input:
    description: The worker host names, for example C(groups['llama_workers']).
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Write the worker list where llama-completion and llama-server read it
  ansible.builtin.copy:
    dest: /etc/llama-rpc/workers
    content: "{{ groups['llama_workers'] | graviton.llama_rpc.worker_list(hostvars) | join(',') }}\n"
    mode: "0644"
"""

RETURN = r"""
_value:
  description: The endpoints, C(address:port).
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.graviton.llama_rpc.plugins.module_utils.rpc_protocol import MAX_WORKERS

DEFAULT_PORT = 50052


def _address(host, host_vars):
    facts = host_vars.get("ansible_facts") or {}
    default_ipv4 = facts.get("default_ipv4") or host_vars.get("ansible_default_ipv4") or {}
    return host_vars.get("rpc_worker_bind_address") or default_ipv4.get("address") or host_vars.get("ansible_host") or host


def host_endpoints(host, host_vars):
    published = host_vars.get("rpc_worker_endpoints")
    if published:
        return list(published)
    address = _address(host, host_vars)
    if ":" in address and not address.startswith("["):
        address = "[%s]" % address
    instances = host_vars.get("rpc_worker_instances") or []
    ports = [instance["port"] for instance in instances] or [host_vars.get("rpc_worker_port") or DEFAULT_PORT]
    return ["%s:%s" % (address, port) for port in ports]


def worker_list(hosts, hostvars):
    if isinstance(hosts, str) or hosts is None:
        raise AnsibleFilterError("worker_list expects a list of worker host names, such as groups['llama_workers']")
    endpoints = []
    for host in hosts:
        if host not in hostvars:
            raise AnsibleFilterError("worker_list: %s is not in the inventory" % host)
        for endpoint in host_endpoints(host, hostvars[host]):
            if endpoint not in endpoints:
                endpoints.append(endpoint)
    if not endpoints:
        raise AnsibleFilterError("the cluster has no RPC workers: put 1 to %d hosts in the workers group (llama_workers)"
                                 % MAX_WORKERS)
    if len(endpoints) > MAX_WORKERS:
        raise AnsibleFilterError("the cluster has %d RPC workers; llama.cpp uses at most %d (GGML_RPC_MAX_SERVERS). "
                                 "Use fewer hosts or fewer rpc_worker_instances" % (len(endpoints), MAX_WORKERS))
    return endpoints


class FilterModule:
    def filters(self):
        return {"worker_list": worker_list}
