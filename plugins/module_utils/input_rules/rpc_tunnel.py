# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""rpc_tunnel's input rules: its settings (as the user set them, and what the role resolved from the host and the
inventory) in, the refusals out, one sentence each naming the variable and what to write instead; [] when all are good."""

from __future__ import annotations

import re

from ansible_collections.graviton.llama_rpc.plugins.module_utils.network.addresses import problems as address_problems
from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.common import in_range, sentences


def rpc_tunnel(settings):
    """rpc_tunnel's rules for one host (the cluster's, such as its network, are the tunnel plan's: module_utils/network/tunnel.py).
    Beside its variables: host, groups (the hosts of the master group and of the worker group, in that order)."""
    s, found = settings, []
    masters, workers = s["groups"]
    if s["host"] not in masters and s["host"] not in workers:
        found.append("%s is in neither the master group '%s' nor the worker group '%s': the tunnel joins a master with its "
                     "workers. Put it in one of them, or set rpc_master_group and rpc_master_worker_group for its cluster "
                     "(inventories/README.md)" % (s["host"], s["rpc_tunnel_master_group"], s["rpc_tunnel_worker_group"]))
    generation = s["rpc_tunnel_key_generation"]
    if not (re.fullmatch(r"[0-9]+", str(generation)) and int(generation) >= 1) or isinstance(generation, bool):
        found.append("rpc_tunnel_key_generation=%s: a whole number, 1 or more (raise it to rotate this host's key)"
                     % generation)
    if not in_range(s["rpc_tunnel_port"], 1, 65535):
        found.append("rpc_tunnel_port=%s: set it from 1 to 65535, WireGuard's UDP port, the same on every host of the cluster"
                     % s["rpc_tunnel_port"])
    if s["rpc_tunnel_endpoint_address"]:
        found += address_problems([{"name": "rpc_tunnel_endpoint_address", "value": s["rpc_tunnel_endpoint_address"],
                                    "kind": "address"}])
    return sentences(found)
