# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The WireGuard tunnel of one cluster: a master and its workers, each worker peered with its master only.

Worked out from what each host reported in this run (the rpc_tunnel role's pre-flight sets it on every host of the play)
or, for a host outside the play (--limit), what it published in an earlier run (local fact llama_rpc_tunnel). Every
host of a cluster computes the same plan from the same inputs: tunnel addresses, peers, and the refusals, each naming
the variable or the host and the fix.

Addresses are stable: a host keeps the address it published as long as it lies in the network and no host before it
in the cluster (the master first, then the workers in inventory order) holds it; the others get the lowest free ones.
So adding or removing a worker moves no other host.
"""

from __future__ import annotations

import ipaddress

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.graviton.llama_rpc.plugins.module_utils.network.addresses import parse_address, parse_network

# WireGuard's own header on top of an IPv6 UDP packet (the largest): wg-quick takes the same 80 bytes off the path MTU.
OVERHEAD = 80
# Networks offered when the one given overlaps a host's: private, and unlikely to be a site's own.
_SUGGESTIONS = ("10.213.0.0/16", "172.31.200.0/21", "192.168.213.0/24")


class Member:
    """One host of the cluster as the plan sees it."""

    def __init__(self, host, role, reported, published):
        self.host = host
        self.role = role  # 'master' or 'worker'
        self.in_play = isinstance(reported, dict)
        self.published = published if isinstance(published, dict) and published.get("address") else {}
        source = reported if self.in_play else self.published
        # Booleans read as Ansible's bool filter reads them: templated without native types, they arrive as text.
        self.enabled = boolean(reported.get("enabled"), strict=False) if self.in_play else bool(self.published)
        self.network = str(source.get("network") or "")
        self.port = _int(source.get("port"))
        self.endpoint_address = str(source.get("endpoint_address") or "")
        self.mtu = _int(source.get("mtu"))
        self.interfaces = list(source.get("interfaces") or []) if self.in_play else []
        # the address and key the host has now (published by an earlier run; the key read from its key file)
        self.address = str((reported or {}).get("address") or self.published.get("address") or "")
        self.public_key = str(source.get("public_key") or "")
        # the key is made or replaced in this run (a new host, or rpc_tunnel_key_generation changed)
        self.key_changes = boolean(source.get("key_changes"), strict=False) if self.in_play else False
        self.peers = list(self.published.get("peers") or [])
        self.planned_address = None

    def describe(self):
        return "the master %s" % self.host if self.role == "master" else "worker %s" % self.host


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _names(hosts):
    hosts = list(hosts)
    return hosts[0] if len(hosts) == 1 else ", ".join(hosts[:-1]) + " and " + hosts[-1]


def _interface_networks(member, skip):
    """(interface, network) of each IPv4 address on the member's interfaces, the tunnel's own left out; from Ansible's
    network facts (ansible_facts[<interface>])."""
    found = []
    for interface in member.interfaces:
        if not isinstance(interface, dict) or interface.get("device") == skip:
            continue
        for address in [interface.get("ipv4")] + list(interface.get("ipv4_secondaries") or []):
            if isinstance(address, dict) and address.get("address") and address.get("prefix") not in (None, ""):
                network = ipaddress.ip_network("%s/%s" % (address["address"], address["prefix"]), strict=False)
                if not network.is_loopback:
                    found.append((interface.get("device"), network))
    return found


def _suggestion(prefix, taken):
    """A private network of the given prefix length that overlaps none of taken, or None."""
    for block in _SUGGESTIONS:
        block = ipaddress.ip_network(block)
        if prefix < block.prefixlen:
            continue
        for candidate in block.subnets(new_prefix=prefix):
            if not any(candidate.overlaps(network) for network in taken):
                return candidate
    return None


def _setting_problems(members, name, attribute):
    """Every member in the play must have the same setting."""
    values = {}
    for member in members:
        values.setdefault(getattr(member, attribute), []).append(member.host)
    if len(values) <= 1:
        return []
    shown = "; ".join("%s on %s" % (value if value != "" else "empty", _names(hosts)) for value, hosts in values.items())
    return ["%s differs within the cluster (%s): set it once for the whole cluster (the group_vars of its group)."
            % (name, shown)]


def plan(masters, workers, reported, published, master_group, interface):
    """The tunnel of one cluster.

    masters, workers: the host names of the master group (one host) and of the worker group, in inventory order.
    reported: {host: what the rpc_tunnel pre-flight reported} for the hosts in this play.
    published: {host: local fact llama_rpc_tunnel} for the hosts that published one.
    master_group: the master group's name (for the messages). interface: the tunnel's interface name.

    Returns {'enabled', 'problems', 'network', 'prefix', 'port', 'mtu', 'members': [{host, role, address, endpoint,
    public_key}, ...] (master first)}.
    """
    result = {"enabled": False, "problems": [], "network": "", "prefix": 0, "port": 0, "mtu": 0, "members": []}
    problems = result["problems"]
    masters, workers = list(masters), [host for host in workers if host not in masters]
    if len(masters) != 1:
        problems.append(
            "Group '%s' holds no master: put the cluster's master in it (or set rpc_master_group to the group that holds "
            "it)." % master_group if not masters else
            "Group '%s' holds %s: a tunnel joins one master with its workers. Give each cluster its own master group "
            "(rpc_master_group and rpc_master_worker_group, inventories/README.md)." % (master_group, _names(masters)))
        return result
    members = [Member(host, "master" if host in masters else "worker", reported.get(host), published.get(host))
               for host in masters + workers]
    in_play = [member for member in members if member.in_play]
    if not in_play:
        return result

    on = [member.host for member in in_play if member.enabled]
    off = [member.host for member in in_play if not member.enabled]
    if on and off:
        problems.append("rpc_tunnel_enabled is true on %s and false on %s, of the same cluster: set it once for the whole "
                        "cluster (the group_vars of its group)." % (_names(on), _names(off)))
        return result
    result["enabled"] = enabled = bool(on)
    if not enabled:
        # Turning the tunnel off: a host outside the play would keep serving RPC on its tunnel address only.
        kept = [member for member in members if not member.in_play and member.published]
        problems.extend("%s is not in this play and still has its tunnel: run the play on it too (leave it out of "
                        "--limit), so that the whole cluster leaves the tunnel." % member.describe().capitalize()
                        for member in kept)
        return result

    problems.extend(_setting_problems(in_play, "rpc_tunnel_network", "network")
                    + _setting_problems(in_play, "rpc_tunnel_port", "port"))
    if problems:
        return result
    text, port = in_play[0].network, in_play[0].port
    try:
        network = parse_network(text)
    except ValueError as error:
        problems.append("rpc_tunnel_network=%r is not a network: %s." % (text, error))
        return result
    if network.version != 4:
        problems.append("rpc_tunnel_network=%s is IPv6; llama.cpp's RPC server listens on IPv4 only: give an IPv4 "
                        "network, such as 10.213.0.0/24." % network)
        return result
    if not network.is_private:
        problems.append("rpc_tunnel_network=%s is public; the tunnel would hide real hosts' addresses: give a private "
                        "network, such as 10.213.0.0/24." % network)
    hosts = list(network.hosts())
    if len(hosts) < len(members):
        problems.append("rpc_tunnel_network=%s holds %d host addresses; this cluster needs %d (its master and workers): "
                        "give a larger network (a /24 holds 254)." % (network, len(hosts), len(members)))
    if not 1 <= port <= 65535:
        problems.append("rpc_tunnel_port=%s: set it from 1 to 65535 (WireGuard's UDP port; 51820 by default)." % port)

    taken = []
    for member in in_play:
        for device, theirs in _interface_networks(member, interface):
            taken.append(theirs)
            if theirs.overlaps(network):
                problems.append("rpc_tunnel_network=%s overlaps %s, the network of %s on %s: packets for those hosts "
                                "would go into the tunnel." % (network, theirs, device, member.host))
    if any(problem.startswith("rpc_tunnel_network=%s overlaps" % network) for problem in problems):
        free = _suggestion(network.prefixlen, taken)
        problems.append("Choose an rpc_tunnel_network that none of the cluster's hosts uses%s."
                        % (", such as %s" % free if free else ""))

    for member in members:
        if member.in_play and not member.endpoint_address:
            problems.append("%s has no address its peers can reach (no default route): set rpc_tunnel_endpoint_address "
                            "on it." % member.host)
    if problems:
        return result
    _allocate(members, hosts)
    problems.extend(_missing_peers(members, network, port))
    if problems:
        return result

    result.update(network=str(network), prefix=network.prefixlen, port=port,
                  mtu=min([member.mtu for member in in_play if member.mtu] or [1500]) - OVERHEAD)
    result["members"] = [{
        "host": member.host,
        "role": member.role,
        "address": str(member.planned_address),
        "endpoint": "%s:%d" % (member.endpoint_address or member.published.get("endpoint_address", ""), port),
        "public_key": member.public_key,
    } for member in members]
    return result


def _missing_peers(members, network, port):
    """A host outside the play cannot learn a peer's new key or address: each pair (the master and a worker) must either
    both be in the play, or the one outside must already know the other as it is (its published peers)."""
    problems = []
    master = members[0]
    for worker in members[1:]:
        for outside, inside in ((master, worker), (worker, master)):
            if outside.in_play:
                continue
            if not outside.published:
                problems.append("%s is not in this play and has no tunnel this run could read, so %s would have no "
                                "peer there: run the play on it too (leave it out of --limit)."
                                % (outside.describe().capitalize(), inside.host))
                return problems
            if outside.published.get("network") != str(network) or _int(outside.published.get("port")) != port:
                problems.append("%s is not in this play and its tunnel has another network or port (%s, %s): run the "
                                "play on it too." % (outside.describe().capitalize(), outside.published.get("network"),
                                                     outside.published.get("port")))
                return problems
            if not inside.in_play:
                continue
            known = {(peer.get("public_key"), peer.get("address")) for peer in outside.peers if isinstance(peer, dict)}
            if inside.key_changes or (inside.public_key, str(inside.planned_address)) not in known:
                problems.append("%s is not in this play and does not know %s's key and address as they will be (a new "
                                "host, a rotated key or a moved address): run the play on it too (leave it out of "
                                "--limit)." % (outside.describe().capitalize(), inside.host))
    return problems


def _allocate(members, hosts):
    """Each member keeps its published address when it still fits (the hosts outside the play first: they cannot
    move); the others get the lowest free ones, in order."""
    usable, held = set(hosts), set()
    for member in sorted(members, key=lambda member: member.in_play):
        try:
            address = parse_address(member.address) if member.address else None
        except ValueError:
            address = None
        if address is not None and address in usable and address not in held:
            member.planned_address = address
            held.add(address)
    free = (address for address in hosts if address not in held)
    for member in members:
        if member.planned_address is None:
            member.planned_address = next(free)
