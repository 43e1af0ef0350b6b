"""The gguf_plan module without llama.cpp (the collection's own figures), on real GGUF files written
by tests/tools/tiny_model. Against llama.cpp's own projection: test_model_arch.py (recorded) and
tests/integration/test_plan_against_llama_cpp.py (live); the planner's own cases:
module_utils/plan/test_fit_plan.py."""

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import gguf
from ansible_collections.graviton.llama_rpc.plugins.modules import gguf_plan
from tests.unit.plugins.module_runner import run_module
from tests.unit.plugins.module_utils.plan.test_fit_plan import GIB, shape_of


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


def test_draft_mtp_on_a_model_without_prediction_layers_is_refused_before_any_plan(tiny, capsys):
    probe = [{"endpoint": "10.0.0.1:50052", "devices": [{"index": 0, "free": 8 * GIB, "total": 16 * GIB}]}]
    result = run_module(gguf_plan.main, capsys, path=str(tiny), workers=probe, master_memory={"free": 8 * GIB, "total": 16 * GIB},
                        draft={"kind": "draft-mtp"})
    assert result["failed"] and result["msg"] == (
        "the model (tiny) has no multi-token-prediction layers (llama.nextn_predict_layers), which draft-mtp drafts "
        "with. Set rpc_master_spec_type to a kind that drafts otherwise: an n-gram kind, or draft-simple with a small "
        "model of its family"), result
    assert "plan" not in result
    ngram = run_module(gguf_plan.main, capsys, path=str(tiny), workers=probe, master_memory={"free": 8 * GIB, "total": 16 * GIB},
                       draft={"kind": "ngram-simple"})
    assert not ngram.get("failed") and ngram["plan"] and ngram["draft"] is None, "an n-gram kind drafts with no model"


def test_a_masters_share_that_is_no_worker_or_in_layer_mode_is_refused_before_any_plan(tiny, capsys):
    probe = [{"endpoint": "10.0.0.1:50052", "devices": [{"index": 0, "free": 8 * GIB, "total": 16 * GIB}]}]
    master = {"free": 8 * GIB, "total": 16 * GIB}
    for split_mode, share in (("layer", "10.0.0.1:50052"), ("tensor", "127.0.0.1:50052")):
        result = run_module(gguf_plan.main, capsys, path=str(tiny), workers=probe, master_memory=master,
                            split_mode=split_mode, master_share=share)
        assert result["failed"] and result["msg"] == (
            "master_share=%s: the master's share is one of the workers' endpoints (10.0.0.1:50052), in split_mode "
            "tensor only" % share), result
        assert "plan" not in result
