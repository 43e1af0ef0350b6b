"""The collection's model of what llama.cpp b11312 allocates, against llama.cpp's own projection recorded on real model
shapes, and its placement rules (the output layer counted in -ngl, the tied output, the MTP layers).

The models are header-exact files of the real models (tests/tools/model_shapes.py; data sparse). The llama.cpp
figures were recorded from `llama-fit-params --fit-print on` against two RPC workers on loopback, with -ngl 999 and an
equal split (tests/integration/test_plan_against_llama_cpp.py runs the same comparison live, more settings): whole MiB,
rounded down, per device (first worker, second worker, master)."""

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.plan import fit_plan
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import gguf, model_arch
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import tensor_cache

from tests.tools import model_shapes

MIB = 1 << 20
GIB = 1 << 30
ENDPOINTS = ["127.0.0.1:50201", "127.0.0.1:50202"]

# model -> (weights per device, caches per device at 1 slot x 4k, caches at 4 slots x 32k), llama.cpp's MiB
RECORDED = {
    "llama-3.1-70b": ((21273, 21058, 563), (656, 624, 0), (20992, 19968, 0)),
    "qwen3-235b-a22b": ((73670, 71087, 333), (384, 368, 0), (12288, 11776, 0)),
    "gpt-oss-120b": ((31278, 28572, 586), (87, 84, 0), (2364, 2352, 0)),
    "gemma-3-27b": ((8086, 8337, 756), (484, 460, 0), (6416, 6320, 0)),
    "deepseek-v3": ((85586, 85250, 497), (144, 130, 0), (4608, 4176, 0)),
    "qwen3-next-80b-a3b": ((25492, 23694, 166), (87, 83, 0), (1695, 1678, 0)),
}


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """model -> read_model's dict of its header-exact file (DeepSeek-V3 as a set of 4 parts, as published)."""
    directory = tmp_path_factory.mktemp("real")
    models = {}
    for name in RECORDED:
        paths = model_shapes.header(name, directory / f"{name}.gguf", split_max_size=50 * 10**9)
        models[name] = gguf.read_model(paths[0])
    return models


def planner(shape, fraction=0.75, worker_gib=600, master_gib=600, projector=None):
    workers = [{"endpoint": endpoint, "free": worker_gib * GIB, "total": worker_gib * GIB} for endpoint in ENDPOINTS]
    return fit_plan.Planner(shape, 4096, 512, workers, {"free": master_gib * GIB, "total": master_gib * GIB}, fraction,
                            projector=projector)


def close_to(ours, recorded):
    """Our bytes against llama.cpp's whole MiB (rounded down): the same MiB or the next (alignment padding)."""
    return recorded <= ours / MIB < recorded + 2


@pytest.mark.parametrize("name", list(RECORDED))
def test_weights_and_caches_per_device_are_llama_cpps(real, name):
    weights, small_caches, big_caches = RECORDED[name]
    shape = model_arch.shape(real[name])
    assert shape["modelled"]
    for slots, context, caches in ((1, 4096, small_caches), (4, 32768, big_caches)):
        plan = fit_plan.Planner(shape, context, 512, [{"endpoint": e, "free": 600 * GIB, "total": 600 * GIB} for e in ENDPOINTS],
                                {"free": 600 * GIB, "total": 600 * GIB}, 0.75)
        nodes, master = plan.evaluate(slots, shape["layers"] + 1)
        for node, recorded_weights, recorded_caches in zip(nodes + [master], weights, caches):
            assert close_to(node["weights"], recorded_weights), (name, node["name"], node["weights"] / MIB)
            assert (node["kv"] == 0 if recorded_caches == 0 else close_to(node["kv"], recorded_caches)), (
                name, slots, context, node["name"], node["kv"] / MIB, recorded_caches)


def test_what_the_issue_found_is_fixed(real):
    """Gemma 3's 5:1 sliding window: 12.4 GiB of cache at 4 x 32k, not 62; gpt-oss's every other layer: 4.6 GiB, not
    9.0; DeepSeek V3's MLA: a K cache of 576 values per token and layer, no V."""
    gemma = model_arch.shape(real["gemma-3-27b"])
    assert sum(model_arch.layer_cache_bytes(gemma, layer, 4 * 32768, 4) for layer in range(62)) / GIB == pytest.approx(12.44, abs=0.01)
    assert sum(entry["swa"] for entry in gemma["kv"]) == 52 and gemma["sliding_window"] == 1024
    oss = model_arch.shape(real["gpt-oss-120b"])
    assert sum(model_arch.layer_cache_bytes(oss, layer, 4 * 32768, 4) for layer in range(36)) / GIB == pytest.approx(4.61, abs=0.01)
    deepseek = model_arch.shape(real["deepseek-v3"])
    assert deepseek["kv"][0] == {"k": 576, "v": 0, "swa": False} and deepseek["kv"][61] is None
    hybrid = model_arch.shape(real["qwen3-next-80b-a3b"])
    assert sum("state" in entry for entry in hybrid["kv"]) == 36 and sum("k" in entry for entry in hybrid["kv"]) == 12


def test_the_output_layer_counts_in_ngl(real):
    """llama.cpp offloads the layers from n_layer + 1 - ngl: -ngl 76 of Llama-3.1-70B's 80 layers puts layers 5 to 79 and
    the output layer on the workers (the issue's plan put layers 4 to 79 there and forgot the output's 0.86 GB)."""
    shape = model_arch.shape(real["llama-3.1-70b"])
    nodes, master = planner(shape).evaluate(1, 76)
    assert master["layers"] == [0, 1, 2, 3, 4] and nodes[0]["layers"][0] == 5 and nodes[1]["output"]
    assert master["weights"] == shape["input_bytes"] + sum(shape["layer_bytes"][:5])


def test_a_tied_output_is_a_copy_of_the_embeddings_on_the_last_worker(real):
    gemma = real["gemma-3-27b"]
    shape = model_arch.shape(gemma)
    embeddings = next(tensor["bytes"] for tensor in gemma["tensors"] if tensor["name"] == "token_embd.weight")
    assert shape["tied_output"] and shape["tied_copy_bytes"] == embeddings and shape["output_bytes"] == 5376 * 4
    # the largest weight the last worker receives is that copy (one message of the load); each layer's, its own
    assert shape["output_largest_bytes"] == embeddings
    assert shape["layer_largest_bytes"][0] == max(tensor["bytes"] for tensor in gemma["tensors"]
                                                  if tensor["name"].startswith("blk.0."))
    nodes, master = planner(shape).evaluate(1, 999)
    assert nodes[1]["output"] and master["weights"] == embeddings  # the master keeps the input layer
    assert nodes[1]["weights"] == sum(shape["layer_bytes"][layer] for layer in nodes[1]["layers"]) + embeddings + 5376 * 4
    # with the output layer on the master's CPU the copy is counted too: llama.cpp makes one when it repacks the type
    # for the CPU (Q4_K: Gemma-3-27B alone is 16.78 GiB of weights in its projection, 16.04 without the copy)
    _nodes, alone = planner(shape).evaluate(1, 0, workers=[])
    assert alone["weights"] == shape["loaded_bytes"] + embeddings
    staged = tensor_cache.assign(tensor_cache.hashed_tensors(gemma), {"workers": [
        {"name": node["name"], "layers": [node["layers"][0], node["layers"][-1]], "output": node["output"]} for node in nodes]})
    assert [tensor["name"] for tensor in staged[ENDPOINTS[1]] if tensor["layer"] is None] == ["token_embd.weight"]


def test_mtp_layers_are_neither_loaded_nor_staged(real):
    deepseek = real["deepseek-v3"]
    shape = model_arch.shape(deepseek)
    assert shape["layers"] == 62 and shape["nextn_layers"] == 1 and shape["layer_bytes"][61] == 0
    skipped = sum(tensor["bytes"] for tensor in deepseek["tensors"] if tensor["name"].startswith("blk.61."))
    assert skipped > 2.5 * GIB and shape["loaded_bytes"] == shape["weights_bytes"] - skipped
    hashed = tensor_cache.hashed_tensors(deepseek)
    assert not [tensor for tensor in hashed if tensor["name"].startswith("blk.61.")]
    # every tensor of the trunk over 10 MiB is staged, from the part that holds it (a set of 4)
    assert len({tensor["path"] for tensor in hashed}) == 4
    over = {tensor["name"] for tensor in deepseek["tensors"] if tensor["bytes"] > tensor_cache.HASH_THRESHOLD
            and not tensor["name"].startswith(("blk.61.", "token_embd."))}
    assert {tensor["name"] for tensor in hashed} == over
    assert sum(tensor["size"] for tensor in hashed) > 0.98 * (shape["loaded_bytes"] - shape["input_bytes"])


def test_an_architecture_not_modelled_is_not_planned_as_llama(real):
    model = dict(real["llama-3.1-70b"], metadata={
        key.replace("llama.", "granite."): value for key, value in real["llama-3.1-70b"]["metadata"].items()})
    model["metadata"]["general.architecture"] = "granite"
    shape = model_arch.shape(model)
    assert not shape["modelled"]
    with pytest.raises(fit_plan.PlanError, match=r"does not model the caches of architecture 'granite' .* llama.cpp's own "
                                                 r"projection"):
        planner(shape)

    reference = planner(dict(shape, modelled=True))  # llama.cpp would place the weights so (a llama-like granite)

    def projector(endpoints, gpu_layers, split, context, slots):  # and, say, 1 GiB of caches and of compute everywhere
        workers = [worker for worker in reference.workers if worker["endpoint"] in endpoints]
        nodes, master = reference.evaluate(slots, gpu_layers, workers)
        return {"workers": {node["name"]: {"model": node["weights"], "context": GIB, "compute": GIB} for node in nodes},
                "master": {"model": master["weights"], "context": GIB, "compute": GIB}, "complete": True}

    planned = planner(shape, projector=projector).plan(1)
    assert planned["figures"] == "llama.cpp" and planned["workers"][0]["kv_bytes"] == GIB


def test_a_placement_llama_cpp_disagrees_with_is_refused(real):
    shape = model_arch.shape(real["llama-3.1-70b"])

    def projector(endpoints, gpu_layers, split, context, slots):
        return {"workers": {endpoint: {"model": 10 * GIB, "context": GIB, "compute": GIB} for endpoint in endpoints},
                "master": {"model": GIB, "context": 0, "compute": GIB}, "complete": True}

    with pytest.raises(fit_plan.PlanError, match=r"llama.cpp places 10.00 GiB of llama's weights on 127.0.0.1:50201 at -ngl "
                                                 r"81, the collection 20.78 GiB.*rpc_master_stage_caches: false"):
        planner(shape, projector=projector).plan(1)
