"""The tunnel_plan filter: one cluster's WireGuard tunnel (addresses, peers, endpoints) and every refusal, from what
the hosts reported in this play or published in an earlier run."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.graviton.llama_rpc.plugins.filter.tunnel_plan import tunnel_plan

KEYS = {name: (name * 43)[:43] + "=" for name in ("m", "a", "b", "c")}


# the facts rpc_tunnel reports and publishes its tunnel in (the filter knows no role's facts)
FACTS = {"reported_fact": "_rpc_tunnel_member", "published_fact": "llama_rpc_tunnel"}


def interface(device, address, prefix, secondaries=()):
    """An interface as Ansible's setup reports it (ansible_facts[<device>])."""
    return {"device": device, "ipv4": {"address": address, "prefix": str(prefix), "netmask": "", "network": ""},
            "ipv4_secondaries": [{"address": one, "prefix": str(bits)} for one, bits in secondaries]}


def reported(lan, key="", address="", enabled=True, network="10.213.0.0/24", port=51820, mtu=1500, key_changes=None,
             extra_interfaces=()):
    """What rpc_tunnel's pre-flight reports for a host in the play (fact _rpc_tunnel_member)."""
    return {"_rpc_tunnel_member": {
        "enabled": enabled, "network": network, "port": port, "endpoint_address": lan, "mtu": mtu, "address": address,
        "public_key": key, "key_changes": not key if key_changes is None else key_changes,
        "interfaces": [interface("lo", "127.0.0.1", 8), interface("eth0", lan, 24), *extra_interfaces]}}


def published(lan, key, address, peers, network="10.213.0.0/24", port=51820):
    """A host outside the play, as an earlier run left it (local fact llama_rpc_tunnel)."""
    return {"ansible_facts": {"ansible_local": {"llama_rpc_tunnel": {
        "interface": "llama-rpc", "address": address, "network": network, "port": port, "endpoint_address": lan,
        "public_key": key, "peers": [{"public_key": key_, "address": address_} for key_, address_ in peers]}}}}


def plan(hostvars, workers=("a", "b")):
    return tunnel_plan(["m"], list(workers), hostvars, master_group="cluster_master", **FACTS)


def addresses(result):
    return {member["host"]: member["address"] for member in result["members"]}


FRESH = {"m": reported("10.0.1.10"), "a": reported("10.0.1.11"), "b": reported("10.0.1.12")}


def test_a_fresh_cluster_gets_the_lowest_addresses_master_first():
    result = plan(FRESH)
    assert result["problems"] == [] and result["enabled"]
    assert addresses(result) == {"m": "10.213.0.1", "a": "10.213.0.2", "b": "10.213.0.3"}
    assert [member["endpoint"] for member in result["members"]] == ["10.0.1.10:51820", "10.0.1.11:51820", "10.0.1.12:51820"]
    assert [member["role"] for member in result["members"]] == ["master", "worker", "worker"]
    assert (result["network"], result["prefix"], result["port"], result["mtu"]) == ("10.213.0.0/24", 24, 51820, 1420)


def test_the_mtu_is_the_smallest_hosts_less_wireguards_80_bytes():
    hostvars = dict(FRESH, a=reported("10.0.1.11", mtu=9001), m=reported("10.0.1.10", mtu=9001))
    assert plan(hostvars)["mtu"] == 1420
    assert plan({name: reported(f"10.0.1.{index}", mtu=9001) for index, name in enumerate("mab", 10)})["mtu"] == 8921


def test_removing_a_worker_moves_no_other_host():
    """Worker a leaves; b keeps .3 (published), and a new worker c takes the free .2."""
    hostvars = {"m": reported("10.0.1.10", KEYS["m"], "10.213.0.1"), "b": reported("10.0.1.12", KEYS["b"], "10.213.0.3"),
                "c": reported("10.0.1.13")}
    assert addresses(plan(hostvars, workers=("b",))) == {"m": "10.213.0.1", "b": "10.213.0.3"}
    assert addresses(plan(hostvars, workers=("b", "c"))) == {"m": "10.213.0.1", "b": "10.213.0.3", "c": "10.213.0.2"}


def test_an_address_outside_a_new_network_or_held_twice_is_given_anew():
    hostvars = {"m": reported("10.0.1.10", KEYS["m"], "10.99.0.1"),  # the network was another one
                "a": reported("10.0.1.11", KEYS["a"], "10.213.0.5"), "b": reported("10.0.1.12", KEYS["b"], "10.213.0.5")}
    assert addresses(plan(hostvars)) == {"m": "10.213.0.1", "a": "10.213.0.5", "b": "10.213.0.2"}


def test_the_keys_are_the_hosts_own_and_only_public():
    hostvars = {name: reported(f"10.0.1.{index}", KEYS[name]) for index, name in enumerate("mab", 10)}
    members = plan(hostvars)["members"]
    assert [member["public_key"] for member in members] == [KEYS["m"], KEYS["a"], KEYS["b"]]
    assert all(set(member) == {"host", "role", "address", "endpoint", "public_key"} for member in members)


def test_booleans_templated_as_text_are_read_as_booleans():
    """Without native types (ansible-core before 2.19, by configuration) a templated boolean arrives as text."""
    hostvars = {name: reported(f"10.0.1.{index}", enabled="False") for index, name in enumerate("mab", 10)}
    assert plan(hostvars)["enabled"] is False
    hostvars = {name: reported(f"10.0.1.{index}", enabled="True", key_changes="False") for index, name in enumerate("mab", 10)}
    assert plan(hostvars)["enabled"] is True


def test_the_tunnel_off_everywhere_is_no_plan_and_no_problem():
    result = plan({name: reported(f"10.0.1.{index}", enabled=False) for index, name in enumerate("mab", 10)})
    assert result == {"enabled": False, "problems": [], "network": "", "prefix": 0, "port": 0, "mtu": 0, "members": []}


def test_a_worker_outside_the_play_that_knows_its_master_keeps_its_address():
    """deploy.yml --limit m: a's published state stands in for it; its address is its own."""
    hostvars = {"m": reported("10.0.1.10", KEYS["m"], "10.213.0.1"),
                "a": published("10.0.1.11", KEYS["a"], "10.213.0.2", [(KEYS["m"], "10.213.0.1")])}
    result = plan(hostvars, workers=("a",))
    assert result["problems"] == []
    assert result["members"][1] == {"host": "a", "role": "worker", "address": "10.213.0.2",
                                    "endpoint": "10.0.1.11:51820", "public_key": KEYS["a"]}


@pytest.mark.parametrize("case, hostvars, workers, messages", [
    ("enabled on part of the cluster", dict(FRESH, b=reported("10.0.1.12", enabled=False)), ("a", "b"),
     ["rpc_tunnel_enabled is true on m and a and false on b, of the same cluster: set it once for the whole cluster"]),
    ("two networks in one cluster", dict(FRESH, a=reported("10.0.1.11", network="10.214.0.0/24")), ("a", "b"),
     ["rpc_tunnel_network differs within the cluster (10.213.0.0/24 on m and b; 10.214.0.0/24 on a)"]),
    ("two ports in one cluster", dict(FRESH, b=reported("10.0.1.12", port=51821)), ("a", "b"),
     ["rpc_tunnel_port differs within the cluster (51820 on m and a; 51821 on b)"]),
    ("network with host bits", {name: reported(f"10.0.1.{i}", network="10.213.0.7/24") for i, name in enumerate("mab", 10)},
     ("a", "b"), ["rpc_tunnel_network='10.213.0.7/24' is not a network: 10.213.0.7/24 has host bits set",
                  "for the whole network 10.213.0.0/24"]),
    ("IPv6 network", {name: reported(f"10.0.1.{i}", network="fd00:213::/64") for i, name in enumerate("mab", 10)},
     ("a", "b"), ["rpc_tunnel_network=fd00:213::/64 is IPv6; llama.cpp's RPC server listens on IPv4 only"]),
    ("public network", {name: reported(f"10.0.1.{i}", network="8.8.8.0/24") for i, name in enumerate("mab", 10)},
     ("a", "b"), ["rpc_tunnel_network=8.8.8.0/24 is public"]),
    ("too small for the cluster", {name: reported(f"10.0.1.{i}", network="10.213.0.0/31") for i, name in enumerate("mab", 10)},
     ("a", "b"), ["rpc_tunnel_network=10.213.0.0/31 holds 2 host addresses; this cluster needs 3"]),
    ("port out of range", {name: reported(f"10.0.1.{i}", port=70000) for i, name in enumerate("mab", 10)},
     ("a", "b"), ["rpc_tunnel_port=70000: set it from 1 to 65535"]),
    # the hosts' own network, as a user copying the example with a 10.0.0.0/8 site would write
    ("network that overlaps a host's", {name: reported(f"10.0.1.{i}", network="10.0.0.0/16") for i, name in enumerate("mab", 10)},
     ("a", "b"), ["rpc_tunnel_network=10.0.0.0/16 overlaps 10.0.1.0/24, the network of eth0 on m",
                  "the network of eth0 on b", "Choose an rpc_tunnel_network that none of the cluster's hosts uses, such as "
                  "10.213.0.0/16"]),
    ("network that overlaps a secondary address", dict(FRESH, b=reported(
        "10.0.1.12", extra_interfaces=[interface("eth1", "192.168.5.5", 24, [("10.213.0.200", 25)])])), ("a", "b"),
     ["rpc_tunnel_network=10.213.0.0/24 overlaps 10.213.0.128/25, the network of eth1 on b",
      "such as 10.213.1.0/24"]),
    ("host without an address for its peers", dict(FRESH, a=reported("")), ("a", "b"),
     ["a has no address its peers can reach (no default route): set rpc_tunnel_endpoint_address on it"]),
    ("no master", FRESH, ("a", "b"), ["Group 'cluster_master' holds no master"]),
    # --limit: peers outside the play
    ("missing peer: a worker outside the play without a tunnel", {"m": reported("10.0.1.10"), "a": {}}, ("a",),
     ["Worker a is not in this play and has no tunnel this run could read, so m would have no peer there: run the play on it too"]),
    ("missing peer: a master outside the play without a tunnel", {"m": {}, "a": reported("10.0.1.11")}, ("a",),
     ["The master m is not in this play and has no tunnel this run could read, so a would have no peer there"]),
    ("a new worker whose master is outside the play",
     {"m": published("10.0.1.10", KEYS["m"], "10.213.0.1", [(KEYS["a"], "10.213.0.2")]),
      "a": reported("10.0.1.11", KEYS["a"], "10.213.0.2"), "c": reported("10.0.1.13")}, ("a", "c"),
     ["The master m is not in this play and does not know c's key and address as they will be"]),
    ("a rotated key whose master is outside the play",
     {"m": published("10.0.1.10", KEYS["m"], "10.213.0.1", [(KEYS["a"], "10.213.0.2")]),
      "a": reported("10.0.1.11", KEYS["a"], "10.213.0.2", key_changes=True)}, ("a",),
     ["does not know a's key and address as they will be (a new host, a rotated key or a moved address)"]),
    ("a peer outside the play on another network",
     {"m": reported("10.0.1.10", KEYS["m"], "10.213.0.1"),
      "a": published("10.0.1.11", KEYS["a"], "10.214.0.2", [(KEYS["m"], "10.213.0.1")], network="10.214.0.0/24")}, ("a",),
     ["Worker a is not in this play and its tunnel has another network or port (10.214.0.0/24, 51820)"]),
    ("turned off with a worker outside the play",
     {"m": reported("10.0.1.10", enabled=False), "a": published("10.0.1.11", KEYS["a"], "10.213.0.2", [])}, ("a",),
     ["Worker a is not in this play and still has its tunnel: run the play on it too"]),
])
def test_refusals_name_the_variable_or_host_and_the_fix(case, hostvars, workers, messages):
    if case == "no master":
        result = tunnel_plan([], list(workers), hostvars, master_group="cluster_master", **FACTS)
    else:
        result = plan(hostvars, workers)
    text = " ".join(result["problems"])
    for message in messages:
        assert message in text, f"{case}: {message!r} not in {result['problems']}"
    assert result["members"] == [], f"{case}: a plan came with the refusal"


def test_two_masters_in_one_group_are_refused():
    result = tunnel_plan(["m", "a"], ["b"], FRESH, master_group="llama_master", **FACTS)
    assert result["problems"] == ["Group 'llama_master' holds m and a: a tunnel joins one master with its workers. Give "
                                  "each cluster its own master group (rpc_master_group and rpc_master_worker_group, "
                                  "inventories/README.md)."]


@pytest.mark.parametrize("masters, workers, hostvars, message", [
    ("m", ["a"], FRESH, "expects the master group's hosts as a list"),
    (["m"], None, FRESH, "expects workers as a list"),
    (["m"], ["nowhere"], FRESH, "nowhere is not in the inventory"),
])
def test_bad_arguments(masters, workers, hostvars, message):
    with pytest.raises(AnsibleFilterError, match=message):
        tunnel_plan(masters, workers, hostvars, **FACTS)


def test_the_facts_are_named_by_the_caller():
    with pytest.raises(AnsibleFilterError, match="needs reported_fact and published_fact"):
        tunnel_plan(["m"], ["a"], FRESH)
