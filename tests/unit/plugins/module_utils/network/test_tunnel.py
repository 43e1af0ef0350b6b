"""module_utils/network/tunnel.py called as the tunnel_plan filter calls it, with what the hosts reported in this play
and what others published in an earlier run (the filter's tests, filter/test_tunnel_plan.py, give every refusal)."""

from ansible_collections.graviton.llama_rpc.plugins.module_utils.network import tunnel


def member(lan, enabled=True):
    return {"enabled": enabled, "network": "10.213.0.0/24", "port": 51820, "endpoint_address": lan, "mtu": 9001,
            "address": "", "public_key": "", "key_changes": True,
            "interfaces": [{"device": "eth0", "ipv4": {"address": lan, "prefix": "24"}, "ipv4_secondaries": []}]}


def test_one_master_and_its_workers_get_addresses_in_inventory_order_and_the_smallest_mtu():
    reported = {"m": member("10.0.1.10"), "a": member("10.0.1.11"), "b": dict(member("10.0.1.12"), mtu=1500)}
    result = tunnel.plan(["m"], ["a", "b", "m"], reported, {}, "cluster_master", "llama-rpc")
    assert result["problems"] == [] and result["enabled"] is True
    assert [(one["host"], one["role"], one["address"], one["endpoint"]) for one in result["members"]] == [
        ("m", "master", "10.213.0.1", "10.0.1.10:51820"), ("a", "worker", "10.213.0.2", "10.0.1.11:51820"),
        ("b", "worker", "10.213.0.3", "10.0.1.12:51820")]
    assert result["mtu"] == 1500 - tunnel.OVERHEAD and result["prefix"] == 24


def test_two_masters_in_one_group_are_refused_before_any_host_is_read():
    result = tunnel.plan(["m", "n"], ["a"], {}, {}, "cluster_master", "llama-rpc")
    assert result["members"] == [] and len(result["problems"]) == 1
    assert "Group 'cluster_master' holds m and n: a tunnel joins one master with its workers" in result["problems"][0]


def test_turning_the_tunnel_off_names_a_host_outside_the_play_that_still_has_it():
    reported = {"m": member("10.0.1.10", enabled=False)}
    published = {"a": {"interface": "llama-rpc", "address": "10.213.0.2", "network": "10.213.0.0/24"}}
    result = tunnel.plan(["m"], ["a"], reported, published, "cluster_master", "llama-rpc")
    assert result["enabled"] is False and len(result["problems"]) == 1
    assert "is not in this play and still has its tunnel: run the play on it too" in result["problems"][0]
