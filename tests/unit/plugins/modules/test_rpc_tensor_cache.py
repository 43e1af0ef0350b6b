"""The worker's tensor cache check, with real parts: the C helper the llama_build role compiles into every build and a
real GGUF file. Checks the names against llama.cpp's hash (FNV-1a 64, here in Python over small ranges), the share of
each worker under a plan, and a cache that is re-checked (a truncated and an altered file are removed) and pruned.
Filling a cache through a real rpc-server is tests/integration/test_rpc_staging.py."""

import json
import os
import subprocess
import time

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import gguf
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import tensor_cache
from ansible_collections.graviton.llama_rpc.plugins.modules import gguf_tensor_hashes, rpc_tensor_cache

from tests.tools.llama_cpp import fnv1a64
from tests.unit.plugins.module_runner import run_module

OWNER = __import__("pwd").getpwuid(os.getuid()).pw_name


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


def fill(cache, model, tensors):
    """Each tensor's bytes from the model file into <cache>/<hash>, as the worker's rpc-server writes them."""
    with open(model, "rb") as handle:
        for tensor in tensors:
            handle.seek(tensor["offset"])
            (cache / tensor["hash"]).write_bytes(handle.read(tensor["size"]))


def test_check_replace_and_prune(tool, model, tmp_path, capsys):
    hashes = run_module(gguf_tensor_hashes.main, capsys, path=str(model), tool=tool, manifest=str(tmp_path / "m.json"))
    assert hashes["changed"] and len(hashes["tensors"]) == 6 and hashes["hash_rate"] > 0
    again = run_module(gguf_tensor_hashes.main, capsys, path=str(model), tool=tool, manifest=str(tmp_path / "m.json"))
    assert not again["changed"] and again["seconds"] == 0 and again["tensors"] == hashes["tensors"]
    first = hashes["tensors"][0]  # the name is llama.cpp's hash of the bytes at the offset
    assert subprocess.run([tool, "hash", str(model), str(first["offset"]), str(first["size"])], capture_output=True,
                          text=True, check=True).stdout.split()[0] == first["hash"]

    cache = tmp_path / "instance" / "rpc"
    stranger = cache / ("%016x" % 0x1234)  # a file of a model the cluster no longer serves
    leftover = cache / (".%016x.partial" % 0x9ABC)  # a temporary file of the stager before it went through rpc-server
    not_ours = cache / "notes.partial"
    cache.mkdir(parents=True)
    for path in (stranger, leftover, not_ours):
        path.write_bytes(b"old model")
    wanted = [{"hash": t["hash"], "size": t["size"]} for t in hashes["tensors"]]
    common = dict(dir=str(cache), owner=OWNER, tool=tool, wanted=wanted)
    checked = run_module(rpc_tensor_cache.main, capsys, **common)
    assert sorted((removed["name"], removed["why"]) for removed in checked["removed"]) == [
        (leftover.name, "partial"), (stranger.name, "unused")]
    assert not stranger.exists() and not leftover.exists() and not_ours.exists()
    assert len(checked["missing"]) == 6 and checked["fits"] and oct(cache.stat().st_mode & 0o777) == "0o700"
    assert checked["needed_bytes"] == sum(t["size"] for t in hashes["tensors"])

    fill(cache, model, hashes["tensors"])
    filled = run_module(rpc_tensor_cache.main, capsys, **common)
    assert filled["missing"] == [] and filled["present_bytes"] == checked["needed_bytes"]
    # Verified once: recorded, so the next check reads none of them again.
    assert sorted(json.loads((cache / ".verified.json").read_text())) == sorted(item["hash"] for item in wanted)
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

    # keep: the files of another model the cluster serves stay, unlooked-at; prune false keeps every file
    other = cache / ("%016x" % 0x5678)
    other.write_bytes(b"another served model")
    kept = run_module(rpc_tensor_cache.main, capsys, **dict(common, keep=[other.name]))
    assert other.exists() and not kept["removed"]
    unpruned = run_module(rpc_tensor_cache.main, capsys, **dict(common, prune=False) | {"wanted": wanted[:1]})
    assert other.exists() and not unpruned["removed"] and (cache / wanted[2]["hash"]).exists()


def test_a_cache_file_written_to_while_it_is_verified_is_removed_not_recorded(tool, tmp_path, capsys):
    """Its bytes hashed to its name, then changed before the look after the hash: nothing vouches for what it holds
    now, so it goes (and is sent again), never into the record that spares the next check its read."""
    cache = tmp_path / "rpc"
    cache.mkdir()
    weights = os.urandom(4096)
    name = fnv1a64(weights)
    (cache / name).write_bytes(weights)
    hasher = tmp_path / "hash-then-write"  # hashes as the helper does, then a writer reaches the file
    hasher.write_text(f"#!/bin/sh\n{tool} \"$@\"\nsleep 0.02; printf x >> {cache / name}\n")
    hasher.chmod(0o755)
    result = run_module(rpc_tensor_cache.main, capsys, dir=str(cache), owner=OWNER, tool=str(hasher),
                        wanted=[{"hash": name, "size": len(weights)}])
    assert result["removed"] == [{"name": name, "why": "changed"}] and result["missing"] == [
        {"hash": name, "size": len(weights)}], result
    record = cache / ".verified.json"
    assert not record.exists() or name not in json.loads(record.read_text())


def test_a_cache_too_small_for_its_share_says_so(tool, tmp_path, capsys):
    result = run_module(rpc_tensor_cache.main, capsys, dir=str(tmp_path / "rpc"), owner=OWNER, tool=tool,
                        wanted=[{"hash": "0123456789abcdef", "size": 1 << 60}])
    assert result["fits"] is False and result["needed_bytes"] == 1 << 60 and result["free_bytes"] < 1 << 60
    assert list((tmp_path / "rpc").iterdir()) == []


def test_what_the_master_sends_follows_each_workers_check_of_this_plan():
    a, b, c, d = ("%016x" % n for n in range(1, 5))
    request = {"w1:1": [{"hash": a, "size": 10}, {"hash": b, "size": 20}], "w2:1": [{"hash": c, "size": 30}],
               "w3:1": [{"hash": d, "size": 40}], "w4:1": []}
    reports = {
        "w1:1": {"checked": [b, a], "missing": [{"hash": b, "size": 20}], "fits": True, "free_bytes": 99, "needed_bytes": 20},
        # a check of another plan (the worker's share changed since): it says nothing about this one
        "w2:1": {"checked": [d], "missing": [], "fits": True, "free_bytes": 99, "needed_bytes": 0},
        "w3:1": {"checked": [d], "missing": [{"hash": d, "size": 40}], "fits": False, "free_bytes": 5, "needed_bytes": 40},
    }
    assert tensor_cache.staging_sends(request, reports) == {
        "sends": [{"endpoint": "w1:1", "hashes": [b]}], "unchecked": ["w2:1"],
        "short": [{"endpoint": "w3:1", "free_bytes": 5, "needed_bytes": 40}]}
    # nothing checked (the role run alone): nothing sent, every share with tensors named
    assert tensor_cache.staging_sends(request, {}) == {"sends": [], "unchecked": ["w1:1", "w2:1", "w3:1"], "short": []}
    # caches known empty (the benchmark emptied them): every share whole
    assert tensor_cache.staging_sends(request, {}, everything=True)["sends"] == [
        {"endpoint": "w1:1", "hashes": [a, b]}, {"endpoint": "w2:1", "hashes": [c]}, {"endpoint": "w3:1", "hashes": [d]}]
    # all present: nothing to send
    whole = {"w1:1": dict(reports["w1:1"], missing=[], needed_bytes=0)}
    assert tensor_cache.staging_sends({"w1:1": request["w1:1"]}, whole)["sends"] == []
