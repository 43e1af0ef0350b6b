# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: worker_list
short_description: The llama.cpp worker list (host:port,...) of a cluster, from what its workers published
version_added: 0.1.0
description:
  - Turns the worker hosts into the C(--rpc) list llama.cpp expects, in the order given (the inventory's),
    without duplicates, 1 to 16 entries (llama.cpp's GGML_RPC_MAX_SERVERS).
  - Per host, the endpoints the rpc_worker role published (the only place its address and port settings are
    worked out), that is the fact C(rpc_worker_endpoints) when it ran in this play, else its local fact
    C(llama_rpc_worker) (C(ansible_local), present once facts are gathered on the host).
  - A host with neither is refused, naming the host and the fix (run the rpc_worker role there); so is an endpoint
    that is not an IP address and a port the master can dial (such as a host name, or C(0.0.0.0) from an old run).
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

from ansible_collections.graviton.llama_rpc.plugins.module_utils.network.addresses import parse_address
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp.rpc_protocol import MAX_WORKERS, parse_endpoint


def host_endpoints(host, host_vars):
    """The endpoints the rpc_worker role published for host: this run's fact, else its local fact."""
    published = host_vars.get("rpc_worker_endpoints")
    if published:
        return list(published)
    local = (host_vars.get("ansible_facts") or {}).get("ansible_local") or {}
    instances = (local.get("llama_rpc_worker") or {}).get("instances") or []
    endpoints = [instance.get("endpoint") for instance in instances if instance.get("endpoint")]
    if not endpoints:
        raise AnsibleFilterError(
            "worker_list: %s has published no RPC worker endpoints (neither the fact rpc_worker_endpoints of this run nor "
            "the local fact llama_rpc_worker). Run the rpc_worker role on it (playbooks/deploy.yml does), then again"
            % host)
    for endpoint in endpoints:
        check_endpoint(host, endpoint)
    return endpoints


def check_endpoint(host, endpoint):
    """A published endpoint is an IP address the master can dial and a port (rpc_worker publishes nothing else)."""
    try:
        address = parse_address(parse_endpoint(str(endpoint))[0])
    except ValueError as error:
        raise AnsibleFilterError("worker_list: %s published the endpoint %r, which is not address:port (%s). Run the "
                                 "rpc_worker role on it again" % (host, endpoint, error))
    if address.is_unspecified:
        raise AnsibleFilterError("worker_list: %s published %r: the master cannot dial an every-interface address. Run "
                                 "the rpc_worker role on it again (it publishes the host's private address)" % (host, endpoint))


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
