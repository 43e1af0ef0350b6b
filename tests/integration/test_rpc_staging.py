"""Staging through a real llama.cpp RPC worker (ggml-rpc-server -c, the pinned build): the master's module sends a
model's tensors the way a load sends a tensor the worker lacks, the worker writes its own cache files, and a load
afterwards finds every one (the worker stores nothing new). The worker-side check then finds nothing missing."""

import os
import socket
import subprocess

import pytest
from ansible_collections.graviton.llama_rpc.plugins.modules import gguf_tensor_hashes, rpc_tensor_cache, rpc_tensor_send

from tests.bench.load import Worker
from tests.tools import llama_cpp, tiny_model
from tests.unit.plugins.module_runner import run_module

OWNER = __import__("pwd").getpwuid(os.getuid()).pw_name


@pytest.fixture()
def big_model(tmp_path_factory):
    """Two layers whose feed-forward tensors are 11 MB each (over llama.cpp's 10 MiB threshold)."""
    return tiny_model.write_model(tmp_path_factory.mktemp("model") / "big.gguf", embd=256, layers=2, ff=10752, heads=4,
                                  kv_heads=2)


def test_staging_fills_the_workers_cache_and_the_load_finds_every_tensor(x86_build, big_model, tmp_path, capsys):
    tool = str(x86_build / "llama-rpc-cache")
    hashes = run_module(gguf_tensor_hashes.main, capsys, path=str(big_model), tool=tool, manifest=str(tmp_path / "m.json"))
    tensors = hashes["tensors"]
    assert len(tensors) == 6
    with Worker(x86_build, tmp_path / "worker") as worker:
        sent = run_module(rpc_tensor_send.main, capsys, model=str(big_model), tensors=tensors,
                          workers=[{"endpoint": worker.endpoint, "hashes": [t["hash"] for t in tensors]}])
        assert not sent.get("failed") and sent["changed"], sent
        assert sent["bytes"] == sum(t["size"] for t in tensors) and sent["workers"][0]["stored"] == 6
        # the worker wrote them under llama.cpp's names, with the bytes of the model file
        assert sorted(os.listdir(worker.cache)) == sorted(t["hash"] for t in tensors)
        for tensor in tensors:
            assert (worker.cache / tensor["hash"]).stat().st_size == tensor["size"]
        with capsys.disabled():
            print(f"staging through rpc-server over loopback: {sent['bytes'] / 1e6:.0f} MB in {sent['seconds']:.2f} s "
                  f"({sent['mbit_per_s']} Mbit/s)")

        # the worker-side check agrees: every file is whole, nothing is missing
        checked = run_module(rpc_tensor_cache.main, capsys, dir=str(worker.cache), owner=OWNER, tool=tool,
                             wanted=[{"hash": t["hash"], "size": t["size"]} for t in tensors])
        assert checked["missing"] == [] and checked["removed"] == []

        # a load through the worker finds every tensor by hash: the worker stores nothing new
        saved_before = worker.log.read_text().count("saved to")
        assert saved_before == len(tensors)  # the worker says so for each file it writes: the count below means something
        run = subprocess.run([str(x86_build / "llama-completion"), "-m", str(big_model), "--rpc", worker.endpoint, "-ngl",
                              "99", "-n", "1", "-p", "a", "--no-warmup", "-no-cnv", "-t", "1", "-lv", "4"],
                             capture_output=True, text=True, timeout=300, check=False)
        assert run.returncode == 0, run.stderr[-2000:]
        assert worker.log.read_text().count("saved to") == saved_before, worker.log.read_text()[-2000:]
        assert f"RPC0[{worker.endpoint}] model buffer size" in run.stderr, run.stderr[-2000:]


def test_a_worker_that_is_not_there_or_busy_is_named(x86_build, big_model, tmp_path, capsys):
    tool = str(x86_build / "llama-rpc-cache")
    tensors = run_module(gguf_tensor_hashes.main, capsys, path=str(big_model), tool=tool,
                         manifest=str(tmp_path / "m.json"))["tensors"]
    nobody = f"127.0.0.1:{llama_cpp.free_port()}"
    sent = run_module(rpc_tensor_send.main, capsys, model=str(big_model), tensors=tensors, timeout=2,
                      workers=[{"endpoint": nobody, "hashes": [tensors[0]["hash"]]}])
    assert sent["failed"] and nobody in sent["msg"] and "refused" in sent["msg"]
    unknown = run_module(rpc_tensor_send.main, capsys, model=str(big_model), tensors=tensors,
                         workers=[{"endpoint": nobody, "hashes": ["0123456789abcdef"]}])
    assert unknown["failed"] and "no tensor of the model has the hash 0123456789abcdef" in unknown["msg"]

    with Worker(x86_build, tmp_path / "worker") as worker, \
            socket.create_connection(("127.0.0.1", worker.port), timeout=5) as holder:
        # another client (llama-server) holds the worker: it serves one at a time
        holder.sendall(llama_cpp.RPC_HELLO)
        holder.recv(64)
        busy = run_module(rpc_tensor_send.main, capsys, model=str(big_model), tensors=tensors, timeout=2,
                          workers=[{"endpoint": worker.endpoint, "hashes": [tensors[0]["hash"]]}])
        assert busy["failed"] and worker.endpoint in busy["msg"] and "busy with another client" in busy["msg"]
        assert not worker.cache.exists() or not os.listdir(worker.cache)
