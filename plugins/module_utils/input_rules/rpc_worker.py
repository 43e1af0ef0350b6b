# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""rpc_worker's input rules: its settings (as the user set them, and what the role resolved from the host and the
inventory) in, the refusals out, one sentence each naming the variable and what to write instead; [] when all are good."""

from __future__ import annotations

import re

from ansible_collections.graviton.llama_rpc.plugins.module_utils.network.addresses import problems as address_problems
from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.common import whole, at_least, in_range, unspecified, sentences

_NAME = re.compile(r"^[a-z0-9_-]+$")
_CACHE_DIR = re.compile(r"^/var/cache/[A-Za-z0-9._/-]+$")


def rpc_worker(settings):
    """rpc_worker's rules. Beside its variables, settings holds what the role resolved: host (inventory_hostname),
    binary (the worker program: rpc_worker_binary or the build's), tunnel (rpc_tunnel's state, {} without one), address
    (the address it will bind), host_ipv4 (the host's IPv4 addresses), default_address (its default-route address),
    worker_total (the instances of its cluster in this play), max_workers, master_group_hosts, sources (who the
    firewall would let in)."""
    s, found = settings, []
    host = s["host"]
    if not s["binary"]:
        found.append("No RPC worker program: run the graviton.llama_rpc.llama_build role on %s first (it sets the fact "
                     "llama_build_current and publishes the local fact llama_rpc_build), or set rpc_worker_binary to "
                     "the path of ggml-rpc-server" % host)
    listed = s["rpc_worker_instances"] or []
    instances = listed or [{"name": "main", "port": s["rpc_worker_port"]}]
    for entry in instances:
        if not isinstance(entry, dict):
            found.append("rpc_worker_instances entry %r must be a mapping with a name and a port" % (entry,))
            continue
        wrong = []
        if not _NAME.match(str(entry.get("name", ""))):
            wrong.append("a name of lower-case letters, digits, - and _")
        if not in_range(entry.get("port"), 1, 65535):
            wrong.append("a port from 1 to 65535")
        if entry.get("threads") is not None and not at_least(entry["threads"], 1):
            wrong.append("threads of at least 1 (or none)")
        if wrong:
            found.append("rpc_worker_port=%s must be from 1 to 65535" % s["rpc_worker_port"] if not listed else
                         "rpc_worker_instances entry %s needs %s" % (entry, ", ".join(wrong)))
    mappings = [entry for entry in instances if isinstance(entry, dict)]
    names = [entry.get("name") for entry in mappings]
    ports = [whole(entry.get("port")) for entry in mappings]
    if len(set(map(str, names))) != len(names) or len(set(ports)) != len(ports):
        found.append("rpc_worker_instances: each instance needs its own name and its own port (%s)" % (instances,))
    if s["rpc_worker_threads"] is not None and not at_least(s["rpc_worker_threads"], 1):
        found.append("rpc_worker_threads=%s: a worker needs at least 1 thread (leave it unset for one per vCPU)"
                     % s["rpc_worker_threads"])
    if s["rpc_worker_watchdog_enabled"] and not (at_least(s["rpc_worker_watchdog_timeout"], 1)
                                                 and at_least(s["rpc_worker_watchdog_interval"], 1)):
        found.append("rpc_worker_watchdog_timeout (%s) and rpc_worker_watchdog_interval (%s) must be 1 second or more "
                     "(or set rpc_worker_watchdog_enabled: false)"
                     % (s["rpc_worker_watchdog_timeout"], s["rpc_worker_watchdog_interval"]))
    tunnelled = bool((s["tunnel"] or {}).get("address"))
    if tunnelled:
        # On the tunnel the worker's address and its master's are the tunnel's: settings of their own would undo it.
        conflicts = ((["rpc_worker_bind_address is %s" % s["rpc_worker_bind_address"]] if s["rpc_worker_bind_address"] else [])
                     + (["rpc_worker_allow_any_address is true"] if s["rpc_worker_allow_any_address"] else [])
                     + (["rpc_worker_allowed_sources is %s" % ", ".join(map(str, s["rpc_worker_allowed_sources"]))]
                        if s["rpc_worker_allowed_sources"] else []))
        if conflicts:
            found.append("%s is on the WireGuard tunnel (rpc_tunnel_enabled), where the worker listens on its tunnel "
                         "address only and admits its master's only, but %s: leave them unset, or set "
                         "rpc_tunnel_enabled: false for its cluster" % (host, " and ".join(conflicts)))
    # Parsed, not matched: an address must be exactly one (no prefix, no host name), a source an address or a network
    # without host bits (nftables would widen 10.0.0.7/16 to the whole /16 quietly).
    found += address_problems([
        {"name": "rpc_worker_bind_address", "value": s["address"], "kind": "address", "version": 4,
         "version_reason": "llama.cpp's RPC server listens on IPv4 only (AF_INET sockets): give an IPv4 address of this host.",
         "empty_fix": "%s has no default route, so no private address to default to: set it to one of %s"
                      % (host, ", ".join(s["host_ipv4"]) or "its addresses")},
        {"name": "rpc_worker_allowed_sources", "value": s["rpc_worker_allowed_sources"], "kind": "sources"}])
    if unspecified(s["address"]):
        if not s["rpc_worker_allow_any_address"]:
            found.append("rpc_worker_bind_address=%s would expose the RPC server, which is unauthenticated (anyone who "
                         "reaches it can read and write its memory), on every interface. Leave it empty (this host's "
                         "private address) or set a private address. If you really mean it, set "
                         "rpc_worker_allow_any_address: true" % s["address"])
        elif not s["default_address"]:
            found.append("rpc_worker_bind_address=%s (every interface) leaves no address to give the master: %s has no "
                         "default route. Set rpc_worker_bind_address to its private address" % (s["address"], host))
    cache_dir = str(s["rpc_worker_cache_dir"])
    if not _CACHE_DIR.match(cache_dir) or ".." in cache_dir:
        found.append("rpc_worker_cache_dir=%s cannot be created: systemd creates it for the worker's user "
                     "(CacheDirectory=), so it must be a path under /var/cache/" % cache_dir)
    if not 1 <= s["worker_total"] <= whole(s["max_workers"]):
        found.append("This play sets up %s RPC worker instances; one llama.cpp master uses 1 to %s (GGML_RPC_MAX_SERVERS). "
                     "Use fewer hosts or fewer rpc_worker_instances" % (s["worker_total"], s["max_workers"]))
    firewall = s["rpc_worker_firewall_enabled"]
    group = s["rpc_worker_master_group"]
    if firewall and not s["rpc_worker_allowed_sources"] and len(s["master_group_hosts"]) > 1:
        # Several masters in the group would all be let in: a cluster's workers admit their own master only.
        found.append("Group '%s' holds %s: %s lets in the master of its own cluster only. Put its master alone in that "
                     "group; for several clusters in one inventory, give each cluster's group rpc_master_group and "
                     "rpc_master_worker_group (inventories/README.md). Or list the master in rpc_worker_allowed_sources"
                     % (group, ", ".join(s["master_group_hosts"]), host))
    elif firewall and not s["sources"]:
        found.append("The firewall would let no master in: no address for the hosts of group '%s' (gather their facts "
                     "in this play, e.g. run the play on them too) and rpc_worker_allowed_sources is empty. Set "
                     "rpc_worker_allowed_sources to the master's private address(es), or rpc_worker_firewall_enabled: "
                     "false" % group)
    return sentences(found)
