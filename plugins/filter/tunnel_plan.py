# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: tunnel_plan
short_description: The WireGuard tunnel of one cluster - each host's tunnel address, its peers, and what stops it
version_added: 0.1.0
description:
  - Plans the tunnel the rpc_tunnel role builds between a master and its workers (each worker peers with its master
    only), from what each host reported in this play (the fact O(reported_fact) names, which the caller's pre-flight
    sets) or, for a host outside the play (C(--limit)), what it published in an earlier run (the local fact
    O(published_fact) names). Every host of the cluster gets the same plan from the same inputs.
  - Addresses are stable. A host keeps the address it published while it lies in the network and no host before it (the
    master first, then the workers in inventory order) holds it; the others get the lowest free addresses. Adding or
    removing a worker moves no other host.
  - Returns the refusals, each naming the variable or the host and the fix, instead of a plan when the cluster's hosts
    disagree on the settings, the network is not a private IPv4 network large enough for the cluster, it overlaps a
    network on one of the hosts' interfaces (a free one is suggested), a host has no address its peers can reach, or a
    host outside the play would be left with a missing or outdated peer.
options:
  _input:
    description: The master group's hosts (one host).
    type: list
    elements: str
    required: true
  workers:
    description: The worker group's hosts, in inventory order.
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
  reported_fact:
    description: The fact each host of the play sets with what it reports (its addresses, key, settings).
    type: str
    required: true
  published_fact:
    description: The local fact each host published its tunnel in, at an earlier run.
    type: str
    required: true
  master_group:
    description: The master group's name, for the messages.
    type: str
    default: llama_master
  interface:
    description: The tunnel's interface name (its own network is not an overlap).
    type: str
    default: llama-rpc
"""

EXAMPLES = r"""
- name: Plan this host's cluster tunnel
  ansible.builtin.set_fact:
    _tunnel: >-
      {{ groups['llama_master'] | graviton.llama_rpc.tunnel_plan(groups['llama_workers'], hostvars,
           reported_fact='_my_role_member', published_fact='my_role_tunnel') }}

- name: Refuse what stops it
  ansible.builtin.assert:
    that: _tunnel.problems | length == 0
    fail_msg: "{{ _tunnel.problems | join(' ') }}"
"""

RETURN = r"""
_value:
  description: The plan.
  type: dict
  contains:
    enabled:
      description: Whether the cluster's hosts in the play have the tunnel on.
      type: bool
    problems:
      description: One sentence per refusal; empty when the plan holds.
      type: list
      elements: str
    network:
      description: The tunnel's network (CIDR); empty with problems or the tunnel off.
      type: str
    prefix:
      description: Its prefix length.
      type: int
    port:
      description: WireGuard's UDP port on every host.
      type: int
    mtu:
      description: The tunnel interface's MTU, the smallest of the hosts' default-route MTUs less WireGuard's 80 bytes.
      type: int
    members:
      description: Master first, then the workers; each with C(host), C(role) (master or worker), C(address) (on the
        tunnel), C(endpoint) (C(address:port) its peers send to) and C(public_key) (empty until the host has a key).
      type: list
      elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.graviton.llama_rpc.plugins.module_utils.network.tunnel import plan


def _published(host_vars, fact):
    local = (host_vars.get("ansible_facts") or {}).get("ansible_local") or {}
    return local.get(fact) or {}


def tunnel_plan(masters, workers, hostvars, reported_fact=None, published_fact=None, master_group="llama_master",
                interface="llama-rpc"):
    if not reported_fact or not published_fact:
        raise AnsibleFilterError("tunnel_plan needs reported_fact and published_fact: the facts the hosts report and "
                                 "publish their tunnel in")
    for name, hosts in (("the master group's hosts", masters), ("workers", workers)):
        if isinstance(hosts, str) or hosts is None:
            raise AnsibleFilterError("tunnel_plan expects %s as a list of host names, such as groups['llama_workers']" % name)
    reported, published = {}, {}
    for host in list(masters) + list(workers):
        if host not in hostvars:
            raise AnsibleFilterError("tunnel_plan: %s is not in the inventory" % host)
        host_vars = hostvars[host]
        if isinstance(host_vars.get(reported_fact), dict):
            reported[host] = host_vars.get(reported_fact)
        published[host] = _published(host_vars, published_fact)
    return plan(masters, workers, reported, published, master_group, interface)


class FilterModule:
    def filters(self):
        return {"tunnel_plan": tunnel_plan}
