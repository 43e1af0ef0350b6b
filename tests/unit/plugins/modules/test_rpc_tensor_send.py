"""rpc_tensor_send's own decisions, with a real GGUF file and real sockets on loopback: each worker's list checked
against the model's tensors before anything is sent, check mode sends nothing, and a worker that cannot be reached is
named with its reason. Filling a real rpc-server's cache is tests/integration/test_rpc_staging.py's."""

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import tensor_cache
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import gguf
from ansible_collections.graviton.llama_rpc.plugins.modules import rpc_tensor_send

from tests.tools import llama_cpp
from tests.unit.plugins.module_runner import run_module


@pytest.fixture()
def tensors(model):
    """The model's tensors that travel by hash, each with a made-up name (only the module's bookkeeping reads it)."""
    return [dict(tensor, hash="%016x" % index) for index, tensor in enumerate(tensor_cache.hashed_tensors(gguf.read_model(model)), 1)]


@pytest.mark.parametrize("worker, message", [
    ({"hashes": []}, "each worker needs endpoint (host:port) and hashes (a list)"),
    ({"endpoint": "127.0.0.1:1", "hashes": "0000000000000001"}, "each worker needs endpoint (host:port) and hashes (a list)"),
    ({"endpoint": "127.0.0.1:1", "hashes": ["00000000000000ff"]}, "127.0.0.1:1: no tensor of the model has the hash 00000000000000ff"),
])
def test_a_worker_list_that_does_not_match_the_model_is_refused(capsys, model, tensors, worker, message):
    result = run_module(rpc_tensor_send.main, capsys, model=str(model), tensors=tensors, workers=[worker])
    assert result["failed"] and message in result["msg"]


def test_check_mode_sends_nothing_and_says_whether_it_would(capsys, model, tensors):
    would = run_module(rpc_tensor_send.main, capsys, model=str(model), tensors=tensors, _ansible_check_mode=True,
                       workers=[{"endpoint": "127.0.0.1:1", "hashes": [tensors[0]["hash"]]}])
    assert would["changed"] is True and would["bytes"] == 0 and would["workers"] == []
    nothing = run_module(rpc_tensor_send.main, capsys, model=str(model), tensors=tensors, _ansible_check_mode=True,
                         workers=[{"endpoint": "127.0.0.1:1", "hashes": []}])
    assert nothing["changed"] is False


def test_a_missing_model_and_an_unreachable_worker_are_named(capsys, model, tensors, tmp_path):
    worker = {"endpoint": "127.0.0.1:%d" % llama_cpp.free_port(), "hashes": [tensors[0]["hash"]]}
    result = run_module(rpc_tensor_send.main, capsys, model=str(tmp_path / "gone.gguf"), tensors=tensors, workers=[worker])
    assert result["failed"] and result["msg"] == "model %s does not exist on this host" % (tmp_path / "gone.gguf")
    result = run_module(rpc_tensor_send.main, capsys, model=str(model), tensors=tensors, workers=[worker], timeout=1)
    assert result["failed"] and result["msg"].startswith("staging failed for %s: " % worker["endpoint"])
    assert result["bytes"] == 0 and result["workers"][0]["stored"] == 0
