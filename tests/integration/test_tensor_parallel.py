"""Tensor parallelism (rpc_master_split_mode: tensor) with llama.cpp's own programs on loopback: the role's stock build
and its build with the rpc_tensor_parallel patch, ggml-rpc-server workers at one thread each, a model of random
weights made here.

- The text and the numbers: greedy tokens in tensor mode are the master alone's and layer mode's, and llama-server's
  two most likely tokens at each step have the same ids and log-probabilities within 1e-3 (the split sums each layer's
  product in another order); the patch's allreduce gives bit for bit the stock fallback's numbers.
- The messages: with the patch no worker runs a graph to add the partial sums (the stock fallback runs one per
  allreduce), and a weight split by columns loads in one message per worker, not one per row, and is cached whole.
- A worker lost in the middle of a stream: llama-server ends with an error that names it (rpc_lost_worker), never a
  hang.
- The plan: gguf_plan in tensor mode, against what each worker really allocates in a load (its alloc_buffer calls,
  GGML_RPC_DEBUG), over two and three workers: never below any worker's, at most 9% above the busiest's."""

import json
import os
import re
import signal
import threading
import time
import urllib.request

import pytest

from ansible_collections.graviton.llama_rpc.plugins.modules import gguf_plan
from tests.tools import llama_cpp, tiny_model
from tests.unit.plugins.module_runner import run_module

TOKENS = 32


@pytest.fixture(scope="module")
def tensor_build(tmp_path_factory):
    # and rpc_lost_worker, whose abort names the worker a stream lost
    return llama_cpp.role_build(tmp_path_factory.mktemp("tensor-build"), patches=["rpc_tensor_parallel", "rpc_lost_worker"])


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    # feed-forward matrices of 16 MiB: a worker's half of one (8 MiB) stays under llama.cpp's 10 MiB hash threshold,
    # the down projection's 2 x 2048 rows are 4 MiB slices; the gate and up are split by rows
    return tiny_model.write_model(tmp_path_factory.mktemp("tensor-model") / "tensor.gguf", embd=1024, layers=4, ff=4096,
                                  heads=8, kv_heads=4, context=1024)


def greedy(bin_dir, model, log_path, *options):
    """llama-server's greedy text and, per token, its two most likely (id, log-probability)."""
    with llama_cpp.llama_server(bin_dir, model, log_path, "-fit", "off", "-lv", "4", *options) as port:
        body = {"prompt": "Once upon a time", "n_predict": TOKENS, "temperature": 0, "cache_prompt": False, "n_probs": 2}
        request = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as answer:
            reply = json.loads(answer.read())
    return reply["content"], [[(top["id"], top["logprob"]) for top in step["top_logprobs"]]
                              for step in reply["completion_probabilities"]]


def test_tensor_mode_writes_the_master_alones_tokens_and_the_patch_sums_as_llama_cpp_does(
        x86_build, tensor_build, model, tmp_path):
    alone = greedy(x86_build, model, tmp_path / "alone.log")
    runs = {}
    with llama_cpp.loopback_workers(x86_build, 2, threads=1) as endpoints:
        over = ("--rpc", ",".join(endpoints), "-ngl", "999", "-fa", "on")
        runs["layer"] = greedy(x86_build, model, tmp_path / "layer.log", *over)
        runs["tensor, stock"] = greedy(x86_build, model, tmp_path / "stock.log", *over, "-sm", "tensor")
    with llama_cpp.loopback_workers(tensor_build, 2, threads=1) as endpoints:
        over = ("--rpc", ",".join(endpoints), "-ngl", "999", "-fa", "on")
        runs["tensor, patched"] = greedy(tensor_build, model, tmp_path / "patched.log", *over, "-sm", "tensor")
    assert "creating a Meta device for tensor parallelism from 2 devices" in (tmp_path / "patched.log").read_text()
    text, top = alone
    assert len(text) >= TOKENS // 2 and len(top) == TOKENS
    for name, (other_text, other_top) in runs.items():
        assert other_text == text, (name, other_text, text)
        for step, (ours, theirs) in enumerate(zip(other_top, top)):
            assert [token for token, _logprob in ours] == [token for token, _logprob in theirs], (name, step, ours,
                                                                                                  theirs)
            assert all(abs(a - b) <= 1e-3 for (_token, a), (_other, b) in zip(ours, theirs)), (name, step, ours, theirs)
    # the patch adds the partial sums in the fallback's order: the same numbers, bit for bit
    assert runs["tensor, patched"] == runs["tensor, stock"]
    differences = [abs(a - b) for ours, theirs in zip(runs["tensor, patched"][1], top)
                   for (_token, a), (_other, b) in zip(ours, theirs)]
    print(f"tensor mode against the master alone: {TOKENS} tokens equal, top-2 log-probabilities differ by at most "
          f"{max(differences):.2e}")


def test_a_worker_lost_mid_stream_in_tensor_mode_ends_the_server_with_a_named_error(tensor_build, model, tmp_path):
    """kill -9 of one worker while llama-server streams in tensor mode: the request ends (no hang) and llama-server
    aborts naming the worker (rpc_lost_worker), which its service's restart then follows (as in layer mode)."""
    log = tmp_path / "lost.log"
    with llama_cpp.loopback_workers(tensor_build, 2, threads=1) as endpoints:
        with llama_cpp.llama_server(tensor_build, model, log, "-fit", "off", "--rpc", ",".join(endpoints), "-ngl", "999",
                                    "-fa", "on", "-sm", "tensor") as port:
            ended = {}

            def stream():
                body = {"prompt": "Once upon a time", "n_predict": 100000, "ignore_eos": True, "temperature": 0}
                request = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=json.dumps(body).encode(),
                                                 headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(request, timeout=120) as answer:
                        ended["answer"] = answer.read()
                except OSError as error:
                    ended["error"] = error
            streaming = threading.Thread(target=stream)
            streaming.start()
            time.sleep(2)  # tokens are flowing through both workers
            os.kill(endpoints.pids[endpoints[1]], signal.SIGKILL)
            killed = time.monotonic()
            streaming.join(90)
            assert not streaming.is_alive(), "the request hung after its worker was lost"
            took = time.monotonic() - killed
    text = log.read_text(errors="replace")
    assert "error" in ended and f"Remote RPC server {endpoints[1]} crashed or returned malformed response" in text, \
        (ended, text[-3000:])
    print(f"a worker lost mid-stream in tensor mode: the request ended {took:.1f} s after the kill, llama-server aborted")


def test_the_patch_adds_the_sums_without_graphs_and_loads_a_column_split_weight_in_one_message(
        x86_build, tensor_build, model, tmp_path):
    served = {}
    for name, bin_dir in (("stock", x86_build), ("patched", tensor_build)):
        logs = tmp_path / name
        logs.mkdir()
        with llama_cpp.loopback_workers(bin_dir, 2, threads=1, debug_dir=logs) as endpoints:
            greedy(bin_dir, model, tmp_path / f"{name}.log", "--rpc", ",".join(endpoints), "-ngl", "999", "-fa", "on",
                   "-sm", "tensor")
        served[name] = llama_cpp.rpc_commands(sorted(logs.glob("*.log"))[0].read_text())
    print("one worker's commands, a load and %d tokens: %s" % (TOKENS, served))
    stock, patched = served["stock"], served["patched"]
    # every allreduce of the fallback runs a one-node ADD graph on each worker; the patch runs none
    assert patched["graph_compute"] < 0.6 * stock["graph_compute"], served
    # the attention output and the FFN down projection, split by columns: one message per worker each
    # instead of one per row (1024 and 1024 rows of 4 layers)
    assert stock["set_tensor"] - patched["set_tensor"] >= 4 * (1024 + 1024) - 64, served


@pytest.mark.parametrize("workers", [2, 3])
def test_the_tensor_plan_never_falls_below_what_each_worker_allocates(tensor_build, model, workers, tmp_path, capsys):
    with llama_cpp.loopback_workers(tensor_build, workers, threads=1, debug_dir=tmp_path) as endpoints:
        planned = run_module(gguf_plan.main, capsys, path=str(model), context_size=1024, split_mode="tensor",
                             workers=[{"endpoint": endpoint, "devices": [{"free": 4 << 30, "total": 4 << 30}]}
                                      for endpoint in endpoints],
                             projection={"program": str(tensor_build / "llama-fit-params")})
        assert not planned.get("failed"), planned
        greedy(tensor_build, model, tmp_path / "load.log", "--rpc", ",".join(endpoints), "-ngl", "999", "-fa", "on",
               "-sm", "tensor", "-c", "1024")
    allocated = {}
    for log in sorted(tmp_path.glob("*.log")):
        if log.name[:-4].isdigit():
            sizes = [int(size) for size in re.findall(r"^\[alloc_buffer\] device: \d+, size: (\d+)", log.read_text(), re.M)]
            allocated["127.0.0.1:" + log.name[:-4]] = sum(sizes)
    busiest = max(allocated.values())
    for node in planned["plan"]["workers"]:
        print(f"{workers} workers, {node['name']}: planned {node['need_bytes'] / 2**20:.1f} MiB, allocated "
              f"{allocated[node['name']] / 2**20:.1f} MiB")
        # each worker's figure is the busiest's bound (which worker gets a layer's larger share is llama.cpp's rotation)
        assert allocated[node["name"]] <= node["need_bytes"] <= 1.09 * busiest + (2 << 20), (node, allocated)
