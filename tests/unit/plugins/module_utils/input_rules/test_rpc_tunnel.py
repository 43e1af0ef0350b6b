"""The input rules of rpc_tunnel (module_utils/input_rules/rpc_tunnel.py), case by case: each bad setting is refused with a
sentence that names it and the fix, only the wrong ones are named, and the role's own defaults pass.
These are one host's settings; the cluster's are the tunnel plan's (filter/test_tunnel_plan.py)."""

import pytest
from tests.unit.plugins.module_utils.input_rules.rules import refusals, check

TUNNEL_HOST = {"host": "worker-1", "groups": [["master"], ["worker-1"]], "rpc_tunnel_master_group": "llama_master",
               "rpc_tunnel_worker_group": "llama_workers"}

TUNNEL_CASES = {
    "key generation 0": ({"rpc_tunnel_key_generation": 0}, ["rpc_tunnel_key_generation=0: a whole number, 1 or more"]),
    "key generation that is not a number": ({"rpc_tunnel_key_generation": "2b"},
                                            ["rpc_tunnel_key_generation=2b: a whole number, 1 or more"]),
    "key generation that is a fraction": ({"rpc_tunnel_key_generation": 1.5},
                                          ["rpc_tunnel_key_generation=1.5: a whole number, 1 or more"]),
    "an endpoint that is a host name": ({"rpc_tunnel_endpoint_address": "worker.internal"},
                                        ["rpc_tunnel_endpoint_address='worker.internal' is not an IP address"]),
    "a host in neither group": ({"groups": [["master"], ["worker-2"]]},
                                ["worker-1 is in neither the master group 'llama_master' nor the worker group "
                                 "'llama_workers'", "rpc_master_group and rpc_master_worker_group"]),
}


def test_rpc_tunnel_defaults_pass():
    assert refusals("rpc_tunnel", TUNNEL_HOST, {}) == []
    assert refusals("rpc_tunnel", TUNNEL_HOST, {"rpc_tunnel_key_generation": "3", "rpc_tunnel_endpoint_address": "203.0.113.5",
                                                "groups": [["worker-1"], []]}) == []


@pytest.mark.parametrize("case", sorted(TUNNEL_CASES))
def test_rpc_tunnel_bad_input_is_refused_by_name(case):
    overrides, messages = TUNNEL_CASES[case]
    assert len(check("rpc_tunnel", TUNNEL_HOST, overrides, messages)) == 1
