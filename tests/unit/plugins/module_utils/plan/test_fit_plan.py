"""module_utils/plan/fit_plan.py on a real model's header: the split follows free memory and llama.cpp's placement, the
memory fraction caps it, the master carries what the workers cannot, slots get the whole context each, the advice
when fewer nodes would do, and a model larger than the cluster refused with its numbers."""

from pathlib import Path

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import gguf, model_arch
from ansible_collections.graviton.llama_rpc.plugins.module_utils.plan import fit_plan, llama_fit, tensor_split

MIB, GIB = 1 << 20, 1 << 30
F32 = 0  # ggml type id
DATA = Path(__file__).resolve().parents[4] / "unit" / "data" / "llama-fit-params"


def workers(*free_gib, total_gib=24):
    return [{"endpoint": f"10.0.0.{index}:50052", "free": int(free * GIB), "total": total_gib * GIB}
            for index, free in enumerate(free_gib, start=1)]


def shape_of(path):
    return model_arch.shape(gguf.read_model(path))


def test_split_follows_free_memory_and_llama_cpp_placement(tiny):
    shape = shape_of(tiny)
    plan = fit_plan.plan(shape, 512, 512, workers(12, 4), {"free": 8 * GIB, "total": 24 * GIB}, 0.75)
    assert plan["n_gpu_layers"] == 999 and not plan["master_carries_layers"]
    # 12 GiB and 4 GiB free, both under 75% of 24 GiB: a 3:1 split, in MiB.
    assert plan["tensor_split"] == [12 * 1024, 4 * 1024]
    # llama.cpp: layer il of 5 (4 layers + output) goes where the cumulative share passes il/5:
    # 0, 0.2, 0.4, 0.6 -> first worker (share 0.75); the output layer (0.8) -> second.
    first, second = plan["workers"]
    assert first["layers"] == [0, 3] and first["layer_count"] == 4 and not first["output"]
    assert second["layer_count"] == 0 and second["output"]


def test_memory_fraction_caps_free_memory(tiny):
    shape = shape_of(tiny)
    plan = fit_plan.plan(shape, 512, 512, workers(23, 23), {"free": 8 * GIB, "total": 24 * GIB}, 0.5)
    assert [worker["usable_bytes"] for worker in plan["workers"]] == [12 * GIB, 12 * GIB]


def test_master_carries_layers_when_the_workers_cannot(tiny):
    shape = shape_of(tiny)
    per_node = fit_plan.compute_estimate(shape, 512, True) + 2 * shape["layer_bytes"][0]
    tight = [{"endpoint": "w:1", "free": per_node, "total": 100 * per_node}]
    plan = fit_plan.plan(shape, 512, 512, tight, {"free": 8 * GIB, "total": 24 * GIB}, 0.75)
    assert plan["master_carries_layers"] and plan["n_gpu_layers"] < 5
    assert plan["master"]["layer_count"] >= 1
    assert plan["workers"][0]["need_bytes"] <= plan["workers"][0]["usable_bytes"]


def test_slots_get_the_whole_context_each_and_only_as_many_as_fit(tiny):
    shape = shape_of(tiny)
    roomy = fit_plan.plan(shape, 512, 512, workers(12, 4), {"free": 8 * GIB, "total": 24 * GIB}, 0.75, slots=4)
    assert (roomy["slots"], roomy["slots_asked"], roomy["context"], roomy["server_context"]) == (4, 4, 512, 2048)
    # The KV cache of all four slots is planned: four times one slot's, on the node holding the layers.
    one = fit_plan.plan(shape, 512, 512, workers(12, 4), {"free": 8 * GIB, "total": 24 * GIB}, 0.75)
    assert roomy["workers"][0]["kv_bytes"] == 4 * one["workers"][0]["kv_bytes"] > 0
    # Room on the workers and the master for the weights and two slots' KV cache, not three: two slots, every layer
    # still on the workers (slots are given up before layers move to the master).

    def need(slots):
        planner = fit_plan.Planner(shape, 512, 512, [{"endpoint": "w:1", "free": 1 << 40, "total": 1 << 40}],
                                   {"free": 1 << 40, "total": 1 << 40}, 1.0)
        nodes, master = planner.evaluate(slots, shape["layers"] + 1)
        return nodes[0]["need"], master["need"]
    two_worker, two_master = need(2)
    tight = [{"endpoint": "w:1", "free": two_worker, "total": 2 * two_worker}]
    plan = fit_plan.plan(shape, 512, 512, tight, {"free": two_master, "total": 2 * two_master}, 1.0, slots=4)
    assert (plan["slots"], plan["slots_asked"], plan["server_context"], plan["n_gpu_layers"]) == (2, 4, 1024, 999)


def test_advice_when_fewer_nodes_would_hold_the_model(tiny, huge):
    shape = shape_of(tiny)
    roomy = fit_plan.plan(shape, 512, 512, workers(12, 4), {"free": 8 * GIB, "total": 24 * GIB}, 0.75, slots=4)
    advice = roomy["advice"]
    # A few MB: the master alone, or the first worker alone, holds it; one c8g.medium would (2 GiB at 75%).
    assert advice["master_alone"] and advice["fewest_workers"] == 1 and advice["workers"] == 2, advice
    # One node needs the weights, the KV cache and one compute buffer, not one per node.
    assert 0 < advice["single_node_bytes"] < roomy["need_bytes"] and advice["single_instance"] == "c8g.medium", advice
    # 70B-shaped F32 (255 GiB of weights, 80 layers of 3.19 GiB) on 20 workers of 20 GiB free (18 GiB usable): a worker
    # holds 5 layers with its compute buffer, so the 80 layers and the output head need 17 of the 20; the master (18 GiB
    # usable) cannot hold it alone, a c8g.48xlarge can (384 GiB x 0.75 = 288 GiB for 255.6 GiB).
    big = fit_plan.plan(shape_of(huge), 1024, 512, workers(*[20] * 20),
                        {"free": 20 * GIB, "total": 24 * GIB}, 0.75)
    advice = big["advice"]
    assert not advice["master_alone"] and advice["fewest_workers"] == 17 and advice["single_instance"] == "c8g.48xlarge", advice
    # Every worker needed: no advice to give.
    tight = fit_plan.plan(shape_of(huge), 1024, 512, workers(*[20] * 17),
                          {"free": 20 * GIB, "total": 24 * GIB}, 0.75)
    assert tight["advice"]["fewest_workers"] is None and not tight["advice"]["master_alone"]


def test_model_larger_than_the_cluster_fails_with_numbers(huge):
    shape = shape_of(huge)
    with pytest.raises(fit_plan.PlanError) as error:
        fit_plan.plan(shape, 4096, 512, workers(20, 20), {"free": 20 * GIB, "total": 24 * GIB}, 0.75)
    message = str(error.value)
    assert "does not fit" in message and "weights 255.02 GiB" in message and "54.00 GiB" in message
    assert "10.0.0.1:50052 18.00 GiB" in message


def test_what_the_master_holds_beside_the_model_is_counted_and_named(huge, tiny):
    """The master's reserve (the prompt cache, a draft model) is in its need and named in a refusal; a reserve the
    master has no room for is refused though the workers would hold the model."""
    shape = shape_of(huge)
    with pytest.raises(fit_plan.PlanError) as error:
        fit_plan.plan(shape, 4096, 512, workers(20, 20), {"free": 20 * GIB, "total": 24 * GIB}, 0.75,
                      master_reserved=3 * GIB, reserved_what="llama-server's prompt cache 2.00 GiB and the draft model")
    assert ", llama-server's prompt cache 2.00 GiB and the draft model 3.00 GiB)" in str(error.value)
    small = shape_of(tiny)
    planned = fit_plan.plan(small, 512, 512, workers(20), {"free": 20 * GIB, "total": 24 * GIB}, 0.75,
                            master_reserved=GIB)
    assert planned["master"]["reserved_bytes"] == GIB and planned["master"]["need_bytes"] > GIB
    with pytest.raises(fit_plan.PlanError):
        fit_plan.plan(small, 512, 512, workers(20), {"free": 20 * GIB, "total": 24 * GIB}, 0.75, master_reserved=19 * GIB)


def test_the_master_holds_a_message_per_worker_while_a_known_hashes_load_sends(huge):
    """A load sends a worker one weight at a time, in a message that is a copy of its bytes: a stock master holds one
    such message, the known-hashes build's lanes one per worker at once. The master's need is the larger of the load's
    moment (its weights and the messages) and the serving one; a master with room for one message and not for twenty
    is refused by name when its build sends them at once."""
    shape = shape_of(huge)
    largest = max(shape["layer_largest_bytes"] + [shape["output_largest_bytes"]])
    assert largest == 8192 * 28672 * 4  # a feed-forward matrix in F32
    cluster, roomy = workers(*[20] * 20), {"free": 20 * GIB, "total": 24 * GIB}
    stock = fit_plan.plan(shape, 1024, 512, cluster, roomy, 0.75)
    lanes = fit_plan.plan(shape, 1024, 512, cluster, roomy, 0.75, parallel_sends=True)
    assert stock["master"]["sending_bytes"] == largest and lanes["master"]["sending_bytes"] == 20 * largest
    for planned in (stock, lanes):
        master = planned["master"]
        assert master["need_bytes"] == max(master["weights_bytes"] + master["kv_bytes"] + master["compute_bytes"],
                                           master["weights_bytes"] + master["sending_bytes"])
    assert lanes["master"]["need_bytes"] > 17 * GIB > stock["master"]["need_bytes"]
    small = {"free": 4 * GIB, "total": 24 * GIB}
    assert fit_plan.plan(shape, 1024, 512, cluster, small, 0.75)["master"]["need_bytes"] < 4 * GIB
    with pytest.raises(fit_plan.PlanError) as error:
        fit_plan.plan(shape, 1024, 512, cluster, small, 0.75, parallel_sends=True)
    assert "while it loads, the master's messages to every worker at once hold 17.50 GiB" in str(error.value)


# Tensor mode's plan (fit_plan.tensor_plan, tensor_split.worker_bounds, llama_fit.parse_tensor): llama.cpp's projection
# with --split-mode tensor read as it prints it (one Meta device for every worker), each worker's share bounded from the
# model's header. What each worker really allocates is tests/integration/test_tensor_parallel.py's.

def tiny_llama_shape(layers=4, embd=2048, ff=8192, kv_heads=4, vocab=262):
    return {"architecture": "llama", "layers": layers, "nextn_layers": 0, "kv_heads_min": kv_heads, "tied_output": False,
            "feed_forward_length": ff, "vocab_size": vocab, "embedding_length": embd}


def tiny_llama_tensors(layers=4, embd=2048, ff=8192, kv_dim=512, vocab=262):
    """The tensors of tests/tools/tiny_model.py's LLaMA at these sizes, F32."""
    tensors = [("token_embd.weight", vocab * embd), ("output_norm.weight", embd), ("output.weight", vocab * embd)]
    for il in range(layers):
        tensors += [("blk.%d.attn_norm.weight" % il, embd), ("blk.%d.attn_q.weight" % il, embd * embd),
                    ("blk.%d.attn_k.weight" % il, embd * kv_dim), ("blk.%d.attn_v.weight" % il, embd * kv_dim),
                    ("blk.%d.attn_output.weight" % il, embd * embd), ("blk.%d.ffn_norm.weight" % il, embd),
                    ("blk.%d.ffn_gate.weight" % il, embd * ff), ("blk.%d.ffn_up.weight" % il, embd * ff),
                    ("blk.%d.ffn_down.weight" % il, ff * embd)]
    return {"tensors": [{"name": name, "bytes": 4 * count, "type": F32} for name, count in tensors]}


def test_the_meta_device_is_read_as_llama_cpp_prints_it():
    projected = llama_fit.parse_tensor((DATA / "f32-4-layers-tensor-2-workers.stdout").read_text())
    assert projected["meta"] == {"model": 931 * MIB, "context": 17 * MIB, "compute": 63 * MIB}
    assert projected["master"] == {"model": 3 * MIB, "context": 1 * MIB, "compute": 11 * MIB} and projected["complete"]
    with pytest.raises(llama_fit.ProjectionError, match="no Meta device"):
        llama_fit.parse_tensor((DATA / "llama-3.1-70b-ngl70.stdout").read_text())


@pytest.mark.parametrize("workers, allocated", [(2, 487686144), (3, 334233600)])
def test_a_workers_weights_are_never_below_what_llama_cpp_put_on_the_busiest(workers, allocated):
    """allocated: the weights buffer of the busiest worker in a real load of that model (ggml-rpc-server's alloc_buffer,
    GGML_RPC_DEBUG), recorded on the test machine; with 2 workers every tensor halves exactly."""
    bounds = tensor_split.worker_bounds(tiny_llama_tensors(), tiny_llama_shape(), workers)
    assert allocated <= bounds["weights"] <= allocated * 1.09, bounds
    assert bounds["kv_fraction"] == 0.5  # 4 KV heads: 2 and 2, or 1, 1 and 2


def test_the_plan_keeps_the_most_slots_that_fit_and_names_each_workers_share():
    seen = []

    def projector(endpoints, gpu_layers, split, context, slots):
        seen.append((endpoints, gpu_layers, split, context, slots))
        return {"meta": {"model": 931 * MIB, "context": slots * 17 * MIB, "compute": 63 * MIB},
                "master": {"model": 3 * MIB, "context": 1 * MIB, "compute": 11 * MIB}}
    workers = [{"endpoint": "10.0.2.%d:50052" % n, "free": 1 * GIB, "total": 1 * GIB} for n in (11, 12)]
    bounds = tensor_split.worker_bounds(tiny_llama_tensors(), tiny_llama_shape(), 2)
    planned = fit_plan.tensor_plan(tiny_llama_shape(), bounds, 2048, workers, {"free": 8 * GIB, "total": 8 * GIB}, 0.75, slots=8,
                                   projector=projector)
    # each worker may take 768 MiB: its weights (465 MiB) and compute (63 MiB) leave room for 28 slots' halves of 17 MiB
    assert planned["split_mode"] == "tensor" and planned["slots"] == 8 and planned["n_gpu_layers"] == fit_plan.ALL_LAYERS
    assert planned["tensor_split"] == [] and not planned["master_carries_layers"]
    worker = planned["workers"][0]
    assert worker["weights_bytes"] == bounds["weights"] and worker["kv_bytes"] == 8 * 17 * MIB // 2
    assert worker["need_bytes"] == bounds["weights"] + 8 * 17 * MIB // 2 + 63 * MIB and worker["layers"] == [0, 3]
    assert seen == [(["10.0.2.11:50052", "10.0.2.12:50052"], fit_plan.ALL_LAYERS, [], 2048 * 8, 8)]
    small = [dict(worker, free=740 * MIB, total=740 * MIB) for worker in workers]  # 555 MiB usable each: 3 slots
    planned = fit_plan.tensor_plan(tiny_llama_shape(), bounds, 2048, small, {"free": 8 * GIB, "total": 8 * GIB}, 0.75, slots=8,
                                   projector=projector)
    assert planned["slots"] == 3
    assert all(node["need_bytes"] <= node["usable_bytes"] for node in planned["workers"])


def test_the_masters_share_takes_what_llama_server_leaves_of_the_masters_memory():
    """rpc_master_tensor_on_master: the master's own RPC server reports the master's free memory, which llama-server
    (its input layer, caches and compute buffer, and what is reserved beside them) also draws from."""
    def projector(endpoints, _gpu_layers, _split, _context, slots):
        assert endpoints == ["127.0.0.1:50052", "10.0.2.11:50052"]
        return {"meta": {"model": 931 * MIB, "context": slots * 17 * MIB, "compute": 63 * MIB},
                "master": {"model": 3 * MIB, "context": 1 * MIB, "compute": 11 * MIB}}
    share, worker = ({"endpoint": endpoint, "free": 1 * GIB, "total": 1 * GIB}
                     for endpoint in ("127.0.0.1:50052", "10.0.2.11:50052"))
    bounds = tensor_split.worker_bounds(tiny_llama_tensors(), tiny_llama_shape(), 2)
    master = {"free": 1 * GIB, "total": 1 * GIB}  # 768 MiB usable
    planned = fit_plan.tensor_plan(tiny_llama_shape(), bounds, 2048, [share, worker], master, 0.75, slots=2,
                                   projector=projector, master_reserved=100 * MIB, master_share="127.0.0.1:50052")
    on_master, elsewhere = planned["workers"]
    assert on_master["on_master"] and "on_master" not in elsewhere
    assert on_master["usable_bytes"] == 768 * MIB - planned["master"]["need_bytes"] == 768 * MIB - 115 * MIB
    assert elsewhere["usable_bytes"] == 768 * MIB and planned["slots"] == 2
    # a master with less memory: the share no longer fits beside llama-server, and is named as such
    with pytest.raises(fit_plan.PlanError) as refused:
        fit_plan.tensor_plan(tiny_llama_shape(), bounds, 2048, [share, worker], {"free": 800 * MIB, "total": 800 * MIB},
                             0.75, slots=2, projector=projector, master_reserved=100 * MIB, master_share="127.0.0.1:50052")
    message = str(refused.value)
    assert "127.0.0.1:50052 (the master's share, beside llama-server) can give 485.0 MiB" in message, message
    assert "10.0.2.11:50052 can give" not in message, message  # the worker has room


def test_a_model_that_does_not_fit_in_tensor_mode_is_refused_with_the_numbers():
    def projector(_endpoints, _gpu_layers, _split, _context, slots):
        return {"meta": {"model": 931 * MIB, "context": slots * 17 * MIB, "compute": 63 * MIB},
                "master": {"model": 3 * MIB, "context": 1 * MIB, "compute": 11 * MIB}}
    workers = [{"endpoint": "10.0.2.%d:50052" % n, "free": 600 * MIB, "total": 600 * MIB} for n in (11, 12)]
    with pytest.raises(fit_plan.PlanError) as refused:
        fit_plan.tensor_plan(tiny_llama_shape(), tensor_split.worker_bounds(tiny_llama_tensors(), tiny_llama_shape(), 2), 2048, workers,
                             {"free": 8 * GIB, "total": 8 * GIB}, 0.75, slots=2, projector=projector)
    message = str(refused.value)
    assert message.startswith("the model does not fit in tensor mode, even with one slot: each worker holds a share of "
                              "every layer, 465.1 MiB of weights (the busiest)"), message
    assert "10.0.2.11:50052 can give 450.0 MiB" in message and "set rpc_master_split_mode: layer" in message
    with pytest.raises(fit_plan.PlanError, match="tensor mode is planned with llama.cpp's projection"):
        fit_plan.tensor_plan(tiny_llama_shape(), {}, 2048, workers, {"free": 1, "total": 1}, 0.75)
