"""Staged tensor caches on loopback, with real parts: the C helper the llama_build role compiles into every build,
a real GGUF file, the worker-side module receiving in its own process and the master-side module sending to it.
Checks the names against llama.cpp's hash (FNV-1a 64, here in Python over small ranges), the share of each worker
under a plan, a cache that is re-checked (a truncated and an altered file are removed and sent again) and pruned."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils import gguf, tensor_cache
from ansible_collections.graviton.llama_rpc.plugins.modules import gguf_tensor_hashes, rpc_tensor_cache, rpc_tensor_send

from tests.tools import llama_cpp, tiny_model
from tests.tools.collection import start_module
from tests.unit.plugins.module_runner import run_module

ROOT = Path(__file__).resolve().parents[4]
TOOL_SOURCE = ROOT / "roles" / "llama_build" / "files" / "llama-rpc-cache.c"
OWNER = __import__("pwd").getpwuid(os.getuid()).pw_name


def fnv1a64(data, value=0xCBF29CE484222325):
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % value


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    path = tmp_path_factory.mktemp("tool") / "llama-rpc-cache"
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-o", str(path), str(TOOL_SOURCE)], check=True)
    return str(path)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """Two layers whose feed-forward tensors are 11 MB each (over llama.cpp's 10 MiB threshold), the rest small."""
    return tiny_model.write_model(tmp_path_factory.mktemp("model") / "big.gguf", embd=256, layers=2, ff=10752, heads=4,
                                  kv_heads=2)


def test_the_helper_hashes_like_llama_cpp(tool, tmp_path):
    data = os.urandom(70000)
    (tmp_path / "blob").write_bytes(data)
    out = subprocess.run([tool, "hash", str(tmp_path / "blob"), "0", "70000", "123", "4567"], capture_output=True,
                         text=True, check=True).stdout.split("\n")
    assert out[0] == "%s 70000" % fnv1a64(data) and out[1] == "%s 4567" % fnv1a64(data[123:4690])
    assert subprocess.run([tool, "hash", "/dev/null"], capture_output=True, text=True, check=True).stdout == "cbf29ce484222325 0\n"


def test_hashed_tensors_and_each_workers_share(model):
    tensors = tensor_cache.hashed_tensors(gguf.read_model(model))
    assert sorted(t["name"] for t in tensors) == sorted(f"blk.{layer}.ffn_{kind}.weight" for layer in (0, 1)
                                                        for kind in ("gate", "up", "down"))
    assert all(t["size"] == 256 * 10752 * 4 > tensor_cache.HASH_THRESHOLD for t in tensors)
    assert {t["path"] for t in tensors} == {str(model)}
    with open(model, "rb") as handle:  # the offset is in the file: the bytes there are the tensor's
        handle.seek(tensors[0]["offset"])
        assert handle.read(16) != b"\0" * 16
    plan = {"workers": [{"name": "a:1", "layers": [0, 0], "output": False},
                        {"name": "b:1", "layers": [1, 1], "output": True}]}
    shares = tensor_cache.assign(tensors, plan)
    assert {t["layer"] for t in shares["a:1"]} == {0} and {t["layer"] for t in shares["b:1"]} == {1}
    assert len(shares["a:1"]) == len(shares["b:1"]) == 3
    # A plan made for a one-layer model places nothing of layer 1: refused, not half staged.
    with pytest.raises(tensor_cache.PlanMismatch, match=r"places layers 0 to 0, and the model has blk\.1\.ffn"):
        tensor_cache.assign(tensors, {"workers": [{"name": "a:1", "layers": [0, 0], "output": True}],
                                      "master": {"name": "master", "layers": [], "output": False}})


def test_stage_check_replace_and_prune(tool, model, tmp_path, capsys):
    hashes = run_module(gguf_tensor_hashes.main, capsys, path=str(model), tool=tool, manifest=str(tmp_path / "m.json"))
    assert hashes["changed"] and len(hashes["tensors"]) == 6 and hashes["hash_rate"] > 0
    again = run_module(gguf_tensor_hashes.main, capsys, path=str(model), tool=tool, manifest=str(tmp_path / "m.json"))
    assert not again["changed"] and again["seconds"] == 0 and again["tensors"] == hashes["tensors"]
    with open(model, "rb") as handle:  # the name is llama.cpp's hash of the bytes (checked on a small tensor's worth)
        first = hashes["tensors"][0]
        handle.seek(first["offset"])
        assert subprocess.run([tool, "hash", str(model), str(first["offset"]), str(first["size"])], capture_output=True,
                              text=True, check=True).stdout.split()[0] == first["hash"]

    cache = tmp_path / "instance" / "rpc"
    stranger = cache / ("%016x" % 0x1234)  # a file of a model the cluster no longer serves
    cache.mkdir(parents=True)
    stranger.write_bytes(b"old model")
    wanted = [{"hash": t["hash"], "size": t["size"]} for t in hashes["tensors"]]
    common = dict(dir=str(cache), owner=OWNER, tool=tool, wanted=wanted)
    checked = run_module(rpc_tensor_cache.main, capsys, **common)
    assert [removed["why"] for removed in checked["removed"]] == ["unused"] and not stranger.exists()
    assert len(checked["missing"]) == 6 and checked["fits"] and oct(cache.stat().st_mode & 0o777) == "0o700"

    def stage(missing):
        port = llama_cpp.free_port()
        process = start_module("rpc_tensor_cache", dict(common, wanted=missing, verify=False, prune=False,
                                                        receive={"address": "127.0.0.1", "port": port, "timeout": 60}),
                               tmp_path)
        sent = run_module(rpc_tensor_send.main, capsys, model=str(model), tensors=hashes["tensors"],
                          workers=[{"endpoint": f"127.0.0.1:{port}", "hashes": [item["hash"] for item in missing]}])
        received = json.loads(process.communicate(timeout=60)[0])
        return sent, received

    sent, received = stage(checked["missing"])
    assert not sent.get("failed") and sent["bytes"] == sum(t["size"] for t in hashes["tensors"]), sent
    assert sorted(received["stored"]) == sorted(item["hash"] for item in wanted), received
    with capsys.disabled():
        print(f"staging over loopback: {sent['bytes'] / 1e6:.0f} MB in {sent['seconds']:.2f} s ({sent['mbit_per_s']} Mbit/s)")

    # Hashed as they were stored: recorded as verified, so the next check reads none of them again.
    assert sorted(json.loads((cache / ".verified.json").read_text())) == sorted(item["hash"] for item in wanted)
    assert run_module(rpc_tensor_cache.main, capsys, **common)["missing"] == []
    assert not run_module(rpc_tensor_cache.main, capsys, **common)["changed"], "a re-check changes nothing"

    truncated, altered = cache / wanted[0]["hash"], cache / wanted[1]["hash"]
    os.truncate(truncated, wanted[0]["size"] - 100)
    with open(altered, "r+b") as handle:
        handle.seek(1000)
        handle.write(b"planted")
    time.sleep(0.01)
    rechecked = run_module(rpc_tensor_cache.main, capsys, **common)
    assert sorted((r["name"], r["why"]) for r in rechecked["removed"]) == sorted(
        [(wanted[0]["hash"], "mismatch"), (wanted[1]["hash"], "mismatch")])
    assert sorted(item["hash"] for item in rechecked["missing"]) == sorted([wanted[0]["hash"], wanted[1]["hash"]])
    _sent, received = stage(rechecked["missing"])
    assert len(received["stored"]) == 2
    # Hashed as they were stored: recorded as verified, so the next check reads none of them again.
    assert sorted(json.loads((cache / ".verified.json").read_text())) == sorted(item["hash"] for item in wanted)
    assert run_module(rpc_tensor_cache.main, capsys, **common)["missing"] == []


def test_a_receiver_refuses_what_it_did_not_ask_for(tool, model, tmp_path, capsys):
    hashes = run_module(gguf_tensor_hashes.main, capsys, path=str(model), tool=tool, manifest=str(tmp_path / "m.json"))
    cache = tmp_path / "rpc"
    port = llama_cpp.free_port()
    process = start_module("rpc_tensor_cache", dict(dir=str(cache), owner=OWNER, tool=tool, wanted=[hashes["tensors"][0]],
                                                    verify=False, prune=False,
                                                    receive={"address": "127.0.0.1", "port": port, "timeout": 30}),
                           tmp_path)
    sent = run_module(rpc_tensor_send.main, capsys, model=str(model), tensors=hashes["tensors"],
                      workers=[{"endpoint": f"127.0.0.1:{port}", "hashes": [hashes["tensors"][1]["hash"]]}])
    received = json.loads(process.communicate(timeout=60)[0])
    assert sent["failed"] and "refused" in sent["msg"] and received["failed"]
    assert "does not want" in received["msg"] and not any(cache.iterdir())


def test_a_cache_too_small_for_its_share_is_refused_before_anything_is_received(tool, tmp_path, capsys):
    result = run_module(rpc_tensor_cache.main, capsys, dir=str(tmp_path / "rpc"), owner=OWNER, tool=tool,
                        wanted=[{"hash": "0123456789abcdef", "size": 1 << 60}],
                        receive={"address": "127.0.0.1", "port": llama_cpp.free_port(), "timeout": 5})
    assert result["failed"] and result["fits"] is False and "free space there" in result["msg"]
    assert list((tmp_path / "rpc").iterdir()) == []
