"""The fit planner and the gguf_plan module without llama.cpp (the collection's own figures), on real GGUF files written
by tests/tools/tiny_model. Against llama.cpp's own projection: test_model_arch.py (recorded) and
tests/integration/test_plan_against_llama_cpp.py (live)."""

import os

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.plan import fit_plan
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import gguf, model_arch
from ansible_collections.graviton.llama_rpc.plugins.modules import gguf_plan

from tests.tools import tiny_model
from tests.unit.plugins.module_runner import run_module

GIB = 1 << 30


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_model.write_model(tmp_path_factory.mktemp("model") / "tiny.gguf", layers=4)


@pytest.fixture(scope="module")
def huge(tmp_path_factory):
    """A 70B-shaped F32 model (about 274 GB) as a sparse file: the header is real, the weights a hole."""
    path = tmp_path_factory.mktemp("huge") / "huge.gguf"
    os.truncate(path, tiny_model.write_header_only(path))
    return path


def workers(*free_gib, total_gib=24):
    return [{"endpoint": f"10.0.0.{index}:50052", "free": int(free * GIB), "total": total_gib * GIB}
            for index, free in enumerate(free_gib, start=1)]


def shape_of(path):
    return model_arch.shape(gguf.read_model(path))


def test_header_of_a_real_model(tiny):
    header = gguf.read_header(tiny)
    shape = shape_of(tiny)
    assert (shape["architecture"], shape["layers"], shape["heads"], shape["kv_heads"]) == ("llama", 4, 4, 2)
    assert shape["context_length"] == 512 and shape["vocab_size"] == 262
    # Every byte after the header belongs to exactly one tensor.
    assert sum(tensor["size"] for tensor in header["tensors"]) == header["file_size"] - header["data_offset"]
    per_layer = 4 * (64 + 64 * 64 * 2 + 32 * 64 * 2 + 64 + 3 * 128 * 64)
    assert shape["layer_bytes"] == [per_layer] * 4
    assert shape["input_bytes"] == 4 * 262 * 64 and shape["output_bytes"] == 4 * (262 * 64 + 64)
    assert not shape["tied_output"] and shape["kv"] == [{"k": 32, "v": 32, "swa": False}] * 4


def test_truncated_download_is_refused(tiny, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny.read_bytes()[:-1000])
    with pytest.raises(gguf.GGUFError, match="shorter than its tensor table"):
        gguf.read_header(cut)


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


def test_module_reports_plan_and_refuses_what_does_not_fit(tiny, huge, capsys):
    probe = [{"endpoint": "10.0.0.1:50052", "devices": [{"index": 0, "free": 8 * GIB, "total": 16 * GIB}]}]
    master = {"free": 8 * GIB, "total": 16 * GIB}
    result = run_module(gguf_plan.main, capsys, path=str(tiny), workers=probe, master_memory=master)
    assert result["model"]["layers"] == 4 and result["plan"]["tensor_split"] == [8 * 1024]
    result = run_module(gguf_plan.main, capsys, path=str(huge), workers=probe, master_memory=master)
    assert result["failed"] and "does not fit, even with one slot" in result["msg"]


def test_module_refuses_a_file_that_is_not_gguf(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("not a model\n")
    result = run_module(gguf_plan.main, capsys, path=str(text),
                        workers=[{"endpoint": "w:1", "devices": [{"free": GIB, "total": GIB}]}])
    assert result["failed"] and "is not a GGUF file" in result["msg"]
