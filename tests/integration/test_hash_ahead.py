"""The master's hash-ahead build (llama_build_patches: [rpc_hash_ahead], roles/llama_build/files/patches/) beside
stock, on this machine's loopback: both built by the llama_build role (tests/tools/llama_cpp.role_build; the patched
one compiles only what the patch changes), one stock ggml-rpc-server -c per load, a model whose feed-forward tensors are
over the 10 MiB that travel by hash. A cold load through the patched master writes the cache files a stock master
writes (names and bytes); a warm and a mixed load find them; the greedy tokens are those of stock through the worker
and of the master alone every time. Unset, the patched build loads as stock does."""

import hashlib
import os
import subprocess

import pytest

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import gguf
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import tensor_cache
from tests.bench.load import Worker
from tests.tools import llama_cpp, tiny_model

SHAPE = dict(embd=1024, layers=4, ff=4096, heads=16, kv_heads=16)  # feed-forward tensors of 16 MiB
PROMPT, TOKENS = "The cluster", 12
THREADS = 2


@pytest.fixture(scope="module")
def builds(x86_build, tmp_path_factory):
    """(stock bin dir, hash-ahead bin dir)."""
    return x86_build, llama_cpp.role_build(tmp_path_factory.mktemp("hash-ahead-build"), patches=["rpc_hash_ahead"])


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tiny_model.write_model(tmp_path_factory.mktemp("hash-ahead-model") / "model.gguf", **SHAPE)
    hashed = tensor_cache.hashed_tensors(gguf.read_header(path))
    assert len(hashed) >= 2 * SHAPE["layers"], "the model must have tensors that travel by hash"
    return path, hashed


def greedy(bin_dir, model_path, worker=None, threads=None):
    """The greedy text and llama-completion's log, through the worker when given (every layer on it)."""
    # -lv 4: ggml's info lines, the hash-ahead's among them
    options = (f"--rpc 127.0.0.1:{worker.port} -ngl 999 " if worker else "") + "-t 1 -lv 4"
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    env.pop("GGML_RPC_LOAD_THREADS", None)
    if threads:
        env["GGML_RPC_LOAD_THREADS"] = str(threads)

    def run():
        done = subprocess.run(llama_cpp.greedy_command(bin_dir, model_path, PROMPT, TOKENS, options), shell=True,
                              capture_output=True, text=True, env=env, timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.returncode, done.stderr, (done.stdout, done.stderr)
    return llama_cpp.until_complete(run)


def cache_files(worker):
    """{file name: sha256} of the worker's tensor cache."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in worker.cache.iterdir()}


def test_the_patched_master_loads_as_stock_does_cold_warm_and_mixed(builds, model, tmp_path):
    stock, patched = builds
    model_path, hashed = model
    # the names a worker gives them: FNV-1a 64 of each tensor's bytes in the file (the collection's cache helper)
    ranges = [str(value) for tensor in hashed for value in (tensor["offset"], tensor["size"])]
    names = {line.split()[0] for line in subprocess.run([str(stock / "llama-rpc-cache"), "hash", str(model_path)] + ranges,
                                                        capture_output=True, text=True, check=True).stdout.splitlines()}
    alone, _log = greedy(stock, model_path)

    with Worker(stock, tmp_path / "stock-cold") as worker:
        stock_text, stock_log = greedy(stock, model_path, worker, threads=THREADS)  # the variable means nothing to stock
        stock_files = cache_files(worker)
    assert "ahead of the load" not in stock_log
    assert set(stock_files) == names and len(names) == len(hashed), (sorted(stock_files), sorted(names))

    with Worker(stock, tmp_path / "patched") as worker:
        cold_text, cold_log = greedy(patched, model_path, worker, threads=THREADS)
        assert f"hashing {len(hashed)} tensors ahead of the load on {THREADS} threads" in cold_log, cold_log[-3000:]
        assert cache_files(worker) == stock_files, "the patched master's cold load stored other files than stock's"
        saved = worker.saved()
        assert saved == len(hashed)

        warm_text, warm_log = greedy(patched, model_path, worker, threads=THREADS)
        assert worker.saved() == saved, "a warm load stored tensors again: the hashes computed ahead differ"
        assert "ahead of the load" in warm_log

        removed = sorted(worker.cache.iterdir())[::2]
        for path in removed:
            path.unlink()
        mixed_text, _log = greedy(patched, model_path, worker, threads=THREADS)
        assert worker.saved() == saved + len(removed), "the mixed load did not store exactly the removed tensors"
        assert cache_files(worker) == stock_files

        serial_text, serial_log = greedy(patched, model_path, worker)  # unset: the serial path, as stock
        assert "ahead of the load" not in serial_log and worker.saved() == saved + len(removed)

    for name, text in (("stock through the worker", stock_text), ("cold", cold_text), ("warm", warm_text),
                       ("mixed", mixed_text), ("patched, unset", serial_text)):
        assert text == alone, f"{name}: {text!r} is not the master alone's {alone!r}"
