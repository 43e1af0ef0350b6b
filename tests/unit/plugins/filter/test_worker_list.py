"""The worker_list filter: each worker's endpoints from what the rpc_worker role published, in a stable order."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.graviton.llama_rpc.plugins.filter.worker_list import worker_list


def published(*endpoints):
    """A worker's facts once the rpc_worker role published its instances (local fact llama_rpc_worker)."""
    instances = [{"name": f"i{index}", "endpoint": endpoint, "cache_dir": ""} for index, endpoint in enumerate(endpoints)]
    return {"ansible_facts": {"ansible_local": {"llama_rpc_worker": {"instances": instances}}}}


HOSTVARS = {
    "w1": published("10.0.1.11:50052"),
    "w2": published("10.0.1.12:50060"),
    # this run's fact comes first: the local fact may be the previous run's
    "w3": dict(published("10.0.1.99:50052"), rpc_worker_endpoints=["10.0.1.13:50052", "10.0.1.13:50053"]),
    "w4": published("[fd00::4]:50052", "[fd00::4]:50053"),
}


def test_worker_list_from_this_runs_and_published_endpoints():
    assert worker_list(["w1", "w2", "w3", "w4"], HOSTVARS) == [
        "10.0.1.11:50052", "10.0.1.12:50060", "10.0.1.13:50052", "10.0.1.13:50053", "[fd00::4]:50052", "[fd00::4]:50053"]


def test_worker_list_is_deduplicated_in_a_stable_order():
    assert worker_list(["w2", "w1", "w2", "w1"], HOSTVARS) == ["10.0.1.12:50060", "10.0.1.11:50052"]


@pytest.mark.parametrize("hosts, message", [
    ([], "no RPC workers"),
    ([f"h{index}" for index in range(17)], "17 RPC workers; llama.cpp uses at most 16"),
    (["nowhere"], "nowhere is not in the inventory"),
    ("w1", "expects a list"),
    # its address and port are worked out by the rpc_worker role only, never guessed from the inventory
    (["unpublished"], "unpublished has published no RPC worker endpoints .* Run the rpc_worker role on it"),
    # parsed, not trusted: an endpoint must be an IP address the master can dial
    (["named"], "named published the endpoint 'worker-1.internal:50052', which is not address:port"),
    (["every"], "every published '0.0.0.0:50052': the master cannot dial an every-interface address"),
    (["octets"], "octets published the endpoint '10.0.1.300:50052'"),
])
def test_worker_list_refuses_bad_clusters(hosts, message):
    hostvars = dict(HOSTVARS, unpublished={"ansible_host": "10.0.4.1", "rpc_worker_port": 50052},
                    named=published("worker-1.internal:50052"), every=published("0.0.0.0:50052"),
                    octets=published("10.0.1.300:50052"),
                    **{f"h{index}": published(f"10.0.3.{index}:50052") for index in range(17)})
    with pytest.raises(AnsibleFilterError, match=message):
        worker_list(hosts, hostvars)
