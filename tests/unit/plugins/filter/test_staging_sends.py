"""The staging_sends filter: what the master sends each worker's cache, from what each worker's check found."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.graviton.llama_rpc.plugins.filter.staging_sends import staging_sends

SHARE_A = [{"hash": "aaaaaaaaaaaaaaa1", "size": 11}, {"hash": "aaaaaaaaaaaaaaa2", "size": 22}]
SHARE_B = [{"hash": "bbbbbbbbbbbbbbb1", "size": 33}]
REQUEST = {"10.0.2.11:50052": SHARE_A, "10.0.2.12:50052": SHARE_B, "10.0.2.13:50052": []}


def report(share, missing=(), fits=True):
    return {"checked": [tensor["hash"] for tensor in share], "missing": list(missing), "fits": fits,
            "free_bytes": 100, "needed_bytes": sum(item["size"] for item in missing)}


def test_each_worker_gets_what_its_check_found_missing():
    sends = staging_sends(REQUEST, {"10.0.2.11:50052": report(SHARE_A, [SHARE_A[1]]), "10.0.2.12:50052": report(SHARE_B)})
    assert sends == {"sends": [{"endpoint": "10.0.2.11:50052", "hashes": ["aaaaaaaaaaaaaaa2"]}], "unchecked": [], "short": []}


def test_a_check_of_another_share_counts_for_nothing_and_a_full_cache_is_named():
    sends = staging_sends(REQUEST, {"10.0.2.11:50052": report(SHARE_B), "10.0.2.12:50052": report(SHARE_B, SHARE_B, fits=False)})
    assert sends["unchecked"] == ["10.0.2.11:50052"] and sends["sends"] == []
    assert sends["short"] == [{"endpoint": "10.0.2.12:50052", "free_bytes": 100, "needed_bytes": 33}]


def test_known_empty_caches_get_every_share_whole():
    assert staging_sends(REQUEST, None, everything=True)["sends"] == [
        {"endpoint": "10.0.2.11:50052", "hashes": ["aaaaaaaaaaaaaaa1", "aaaaaaaaaaaaaaa2"]},
        {"endpoint": "10.0.2.12:50052", "hashes": ["bbbbbbbbbbbbbbb1"]}]


def test_it_refuses_what_is_not_a_request():
    with pytest.raises(AnsibleFilterError, match="needs rpc_master_cache_request"):
        staging_sends(["10.0.2.11:50052"])
