"""module_utils/llama_cpp/tensor_cache.py: which tensors travel by hash, which worker each goes to under a plan, and what the
master sends each worker's cache before a first load."""

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import tensor_cache

MIB = 1 << 20


def tensor(name, size_mib, path="m-00001-of-00002.gguf", offset=0):
    return {"name": name, "bytes": int(size_mib * MIB), "path": path, "file_offset": offset}


def model(tensors, layers=2, nextn=0):
    metadata = {"general.architecture": "llama", "llama.block_count": layers}
    if nextn:
        metadata["llama.nextn_predict_layers"] = nextn
    return {"metadata": metadata, "tensors": tensors}


def test_only_tensors_over_10_mib_of_loaded_layers_travel_by_hash_and_the_embeddings_stay():
    found = tensor_cache.hashed_tensors(model([
        tensor("token_embd.weight", 100), tensor("blk.0.ffn_up.weight", 40, offset=4096),
        tensor("blk.0.attn_k.weight", 10), tensor("blk.1.ffn_up.weight", 40, path="m-00002-of-00002.gguf"),
        tensor("blk.2.ffn_up.weight", 40), tensor("output.weight", 60)], layers=3, nextn=1))
    assert [(t["name"], t["layer"], t["path"], t["offset"]) for t in found] == [
        ("blk.0.ffn_up.weight", 0, "m-00001-of-00002.gguf", 4096), ("blk.1.ffn_up.weight", 1, "m-00002-of-00002.gguf", 0),
        ("output.weight", None, "m-00001-of-00002.gguf", 0)]  # 10 MiB exactly is sent as bytes; blk.2 is the MTP layer


def test_tied_embeddings_travel_to_the_output_layers_worker():
    found = tensor_cache.hashed_tensors(model([tensor("token_embd.weight", 100), tensor("blk.0.ffn_up.weight", 40)], layers=1))
    assert [t["name"] for t in found] == ["token_embd.weight", "blk.0.ffn_up.weight"]


PLAN = {"workers": [{"name": "10.0.0.1:50052", "layers": [0, 0], "output": False},
                    {"name": "10.0.0.2:50052", "layers": [1, 1], "output": True}],
        "master": {"layers": []}}


def test_each_tensor_goes_to_the_worker_whose_layers_hold_it_and_a_plan_of_another_model_is_refused():
    tensors = tensor_cache.hashed_tensors(model([tensor("blk.0.ffn_up.weight", 40), tensor("blk.1.ffn_up.weight", 40),
                                                 tensor("output.weight", 60)]))
    shares = tensor_cache.assign(tensors, PLAN)
    assert {endpoint: [t["name"] for t in share] for endpoint, share in shares.items()} == {
        "10.0.0.1:50052": ["blk.0.ffn_up.weight"], "10.0.0.2:50052": ["blk.1.ffn_up.weight", "output.weight"]}
    bigger = tensor_cache.hashed_tensors(model([tensor("blk.%d.ffn_up.weight" % n, 40) for n in range(6)], layers=6))
    with pytest.raises(tensor_cache.PlanMismatch, match="places layers 0 to 1, and the model has blk.2.ffn_up.weight, "
                                                        "blk.3.ffn_up.weight, blk.4.ffn_up.weight and 1 more"):
        tensor_cache.assign(bigger, PLAN)


def test_a_worker_gets_what_its_check_found_missing_and_nothing_unchecked_or_too_big():
    request = {"a:1": [{"hash": "h1", "size": 1}, {"hash": "h2", "size": 2}], "b:1": [{"hash": "h3", "size": 3}],
               "c:1": [{"hash": "h4", "size": 4}], "d:1": []}
    reports = {"a:1": {"checked": ["h2", "h1"], "missing": [{"hash": "h2", "size": 2}], "fits": True},
               "b:1": {"checked": ["h3"], "missing": [{"hash": "h3", "size": 3}], "fits": False, "free_bytes": 1,
                       "needed_bytes": 3},
               "c:1": {"checked": ["another plan's"], "missing": [], "fits": True}}
    assert tensor_cache.staging_sends(request, reports) == {
        "sends": [{"endpoint": "a:1", "hashes": ["h2"]}], "unchecked": ["c:1"],
        "short": [{"endpoint": "b:1", "free_bytes": 1, "needed_bytes": 3}]}
    assert tensor_cache.staging_sends(request, {}, everything=True)["sends"] == [
        {"endpoint": "a:1", "hashes": ["h1", "h2"]}, {"endpoint": "b:1", "hashes": ["h3"]}, {"endpoint": "c:1", "hashes": ["h4"]}]
