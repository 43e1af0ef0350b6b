"""The input rules of rpc_worker (module_utils/input_rules/rpc_worker.py), case by case: each bad setting is refused with a
sentence that names it and the fix, only the wrong ones are named, and the role's own defaults pass."""

import pytest
from tests.unit.plugins.module_utils.input_rules.rules import refusals, check

WORKER = {"host": "worker-1", "binary": "/opt/llama.cpp/current/bin/ggml-rpc-server", "tunnel": {}, "address": "10.0.0.5",
          "host_ipv4": ["10.0.0.5"], "default_address": "10.0.0.5", "worker_total": 1, "max_workers": 16,
          "master_group_hosts": ["master"], "sources": ["10.9.9.9"], "rpc_worker_master_group": "llama_master",
          "rpc_worker_allowed_sources": ["10.9.9.9"]}
TUNNEL = {"address": "10.213.0.2", "interface": "llama-rpc", "unit": "llama-rpc-tunnel",
          "peers": [{"host": "m", "address": "10.213.0.1", "public_key": "k"}]}

WORKER_CASES = {
    "port out of range": ({"rpc_worker_port": 70000}, ["rpc_worker_port=70000 must be from 1 to 65535"]),
    "port that is not a number": ({"rpc_worker_port": "http"}, ["rpc_worker_port=http must be from 1 to 65535"]),
    # only what is wrong in the entry is named
    "instance port out of range": ({"rpc_worker_instances": [{"name": "a", "port": 0}]},
                                   ["rpc_worker_instances entry {'name': 'a', 'port': 0} needs a port from 1 to 65535."]),
    "instance name and threads wrong": ({"rpc_worker_instances": [{"name": "A b", "port": 50052, "threads": 0}]},
                                        ["needs a name of lower-case letters, digits, - and _, threads of at least 1 (or none)."]),
    "instance that is not a mapping": ({"rpc_worker_instances": ["a:50052"]}, ["entry 'a:50052' must be a mapping"]),
    "duplicate instance ports": ({"rpc_worker_instances": [{"name": "a", "port": 50052}, {"name": "b", "port": "50052"}]},
                                 ["each instance needs its own name and its own port"]),
    "duplicate instance names": ({"rpc_worker_instances": [{"name": "a", "port": 50052}, {"name": "a", "port": 50053}]},
                                 ["each instance needs its own name and its own port"]),
    "threads below 1": ({"rpc_worker_threads": 0}, ["rpc_worker_threads=0: a worker needs at least 1 thread"]),
    "watchdog interval of 0": ({"rpc_worker_watchdog_interval": 0},
                               ["rpc_worker_watchdog_timeout (300) and rpc_worker_watchdog_interval (0) must be 1 second"]),
    # addresses are parsed: each of these names the variable and what to write instead
    "bind address that is a host name": ({"address": "worker-1.internal"},
                                         ["rpc_worker_bind_address='worker-1.internal' is not an IP address"]),
    "bind address with a prefix length": ({"address": "10.0.0.5/24"},
                                          ["rpc_worker_bind_address='10.0.0.5/24'",
                                           "is a network (it has a prefix length), not one address: write 10.0.0.5"]),
    "IPv6 bind address": ({"address": "fd00::5"},
                          ["rpc_worker_bind_address='fd00::5' is IPv6; llama.cpp's RPC server listens on IPv4 only"]),
    "no address at all": ({"address": "", "default_address": "", "host_ipv4": ["172.17.0.4"]},
                          ["worker-1 has no default route, so no private address to default to: set it to one of 172.17.0.4"]),
    "master address with an octet above 255": ({"rpc_worker_allowed_sources": ["10.9.9.300"]},
                                               ["rpc_worker_allowed_sources entry '10.9.9.300' is not an IP address or network",
                                                "Octet 300 (> 255)"]),
    "master network with host bits": ({"rpc_worker_allowed_sources": ["10.9.9.9/16"]},
                                      ["for this address alone write 10.9.9.9/32, for the whole network 10.9.0.0/16"]),
    "every interface without the override": ({"address": "0.0.0.0", "rpc_worker_bind_address": "0.0.0.0"},
                                             ["unauthenticated", "rpc_worker_allow_any_address: true"]),
    "every interface with no address to give the master": (
        {"address": "0.0.0.0", "rpc_worker_allow_any_address": True, "default_address": ""},
        ["rpc_worker_bind_address=0.0.0.0 (every interface) leaves no address to give the master: worker-1 has no default"]),
    "cache directory that cannot be created": ({"rpc_worker_cache_dir": "/proc/llama-cache"},
                                               ["rpc_worker_cache_dir=/proc/llama-cache cannot be created"]),
    "cache directory that climbs out of /var/cache": ({"rpc_worker_cache_dir": "/var/cache/../../etc"},
                                                      ["rpc_worker_cache_dir=/var/cache/../../etc cannot be created"]),
    "more than 16 workers": ({"worker_total": 17}, ["sets up 17 RPC worker instances; one llama.cpp master uses 1 to 16"]),
    "firewall without a master": ({"rpc_worker_allowed_sources": [], "sources": []},
                                  ["The firewall would let no master in", "rpc_worker_allowed_sources"]),
    "a master group of several clusters": ({"rpc_worker_allowed_sources": [], "master_group_hosts": ["master-a", "master-b"]},
                                           ["Group 'llama_master' holds master-a, master-b",
                                            "rpc_master_group and rpc_master_worker_group"]),
    "no worker program": ({"binary": ""}, ["run the graviton.llama_rpc.llama_build role", "rpc_worker_binary"]),
    # on the WireGuard tunnel (as rpc_tunnel publishes it) the worker's address and its master's are the tunnel's
    "settings that would undo the tunnel": (
        {"tunnel": TUNNEL, "address": "10.213.0.2", "rpc_worker_bind_address": "10.213.0.2", "rpc_worker_allow_any_address": True},
        ["is on the WireGuard tunnel (rpc_tunnel_enabled), where the worker listens on its tunnel address only",
         "but rpc_worker_bind_address is 10.213.0.2 and rpc_worker_allow_any_address is true and "
         "rpc_worker_allowed_sources is 10.9.9.9: leave them unset, or set rpc_tunnel_enabled: false"]),
}


def test_rpc_worker_defaults_pass():
    assert refusals("rpc_worker", WORKER, {}) == []
    # on the tunnel with nothing of its own; several instances; the firewall off needs no master
    assert refusals("rpc_worker", WORKER, {"tunnel": TUNNEL, "rpc_worker_allowed_sources": []}) == []
    assert refusals("rpc_worker", WORKER, {"rpc_worker_instances": [{"name": "a", "port": 50052, "threads": 4},
                                                                    {"name": "b_2", "port": "50053", "threads": None}]}) == []
    assert refusals("rpc_worker", WORKER, {"rpc_worker_firewall_enabled": False, "rpc_worker_allowed_sources": [],
                                           "sources": []}) == []


@pytest.mark.parametrize("case", sorted(WORKER_CASES))
def test_rpc_worker_bad_input_is_refused_by_name(case):
    overrides, messages = WORKER_CASES[case]
    found = check("rpc_worker", WORKER, overrides, messages)
    assert len(found) == 1, "%s: more than the one wrong thing named: %s" % (case, found)


def test_rpc_worker_names_two_bad_addresses_together_and_nothing_else():
    found = refusals("rpc_worker", WORKER, {"address": "10.0.0.5/24", "rpc_worker_allowed_sources": ["10.9.9.9", "fd00::1/64"]})
    text = " ".join(found)
    assert "rpc_worker_bind_address='10.0.0.5/24'" in text and "entry 'fd00::1/64'" in text, text
    assert "'10.9.9.9'" not in text, "a good source was named"
