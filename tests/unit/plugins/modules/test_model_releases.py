"""model_releases on a real models directory: releases written as model_fetch leaves them (a manifest each, parts that
share bytes by hard links), a rollback found by name, and the removal of what is no longer kept."""

import json
import os

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import model_releases as releases
from ansible_collections.graviton.llama_rpc.plugins.modules import model_releases

from tests.unit.plugins.module_runner import run_module

A, B, C = ("tiny-%s" % (digit * 12) for digit in "abc")


def write_release(models, name, data):
    (models / name).mkdir(parents=True)
    (models / name / "tiny.gguf").write_bytes(data)
    manifest = {"name": name, "base": "tiny", "fetched_at": 1, "parts": [{"file": "tiny.gguf", "sha256": "a" * 64,
                                                                          "size": len(data)}]}
    (models / name / releases.MANIFEST).write_text(json.dumps(manifest))


def history(*names):
    return [{"name": name, "kind": "release", "model_path": "/m/%s/tiny.gguf" % name} for name in names]


def test_a_rollback_is_found_and_nothing_changes(tmp_path, capsys):
    for name in (A, B):
        write_release(tmp_path, name, name.encode())
    result = run_module(model_releases.main, capsys, models_dir=str(tmp_path), history=history(B, A), name="previous")
    assert not result["changed"] and result["entry"]["name"] == A and result["removed"] == []
    assert result["model"]["model_path"] == str(tmp_path / A / "tiny.gguf") and result["model"]["kind"] == "path"
    assert {item["name"]: item["state"] for item in result["releases"]} == {A: "kept", B: "served"}
    refused = run_module(model_releases.main, capsys, models_dir=str(tmp_path), history=history(B), name="previous")
    assert refused["failed"] and "has served no model before " + B in refused["msg"]


def test_what_is_no_longer_kept_goes_and_what_fetches_left_with_it(tmp_path, capsys):
    for name in (A, B, C):
        write_release(tmp_path, name, name.encode() * 100)
    os.link(tmp_path / B / "tiny.gguf", tmp_path / "legacy.gguf")  # a file of before, sharing B's bytes
    (tmp_path / releases.INCOMING / "tiny-dddddddddddd").mkdir(parents=True)
    (tmp_path / releases.INCOMING / "tiny-dddddddddddd" / "tiny.gguf.partial").write_bytes(b"cut")
    state = tmp_path / "state"
    state.mkdir()
    args = dict(models_dir=str(tmp_path), history=history(C, B), keep=0, prune=True, state_dir=str(state))
    check = run_module(model_releases.main, capsys, _ansible_check_mode=True, **args)
    assert check["changed"] and check["removed"] == [A, B, ".incoming/tiny-dddddddddddd"] and (tmp_path / A).exists()
    done = run_module(model_releases.main, capsys, **args)
    assert done["removed"] == check["removed"] and [item["name"] for item in done["releases"]] == [C]
    assert sorted(os.listdir(tmp_path)) == sorted([C, "legacy.gguf", releases.INCOMING, "state"])
    assert os.listdir(tmp_path / releases.INCOMING) == [] and (tmp_path / "legacy.gguf").read_bytes() == B.encode() * 100
    again = run_module(model_releases.main, capsys, **args)
    assert not again["changed"] and again["removed"] == []


def test_a_fetch_under_way_keeps_its_place(tmp_path, capsys):
    """The fetch lock held (a download in progress): its .incoming place stays; releases still go."""
    for name in (A, B):
        write_release(tmp_path, name, name.encode())
    (tmp_path / releases.INCOMING / C).mkdir(parents=True)
    state = tmp_path / "state"
    state.mkdir()
    holder, _holder_pid = releases.fetch_lock(str(state), 1)
    try:
        result = run_module(model_releases.main, capsys, models_dir=str(tmp_path), history=history(B), keep=0, prune=True,
                            state_dir=str(state))
    finally:
        holder.close()
    assert result["removed"] == [A] and (tmp_path / releases.INCOMING / C).is_dir()
