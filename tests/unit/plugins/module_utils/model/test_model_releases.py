"""The decisions about the models a master keeps: a release's name, which model a rollback asks for, which go after a
switch or before a fetch that needs their room, the space a fetch needs, and which tensors the workers' caches keep."""

import json
import os

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import model_releases as releases

A, B, C, D = ("tiny-%s" % (digit * 12) for digit in "abcd")


def served(*names):
    """A history, newest first, each with the cache files the plan put on one worker."""
    return [{"name": name, "kind": "release", "model_path": "/m/%s/tiny.gguf" % name,
             "cached_hashes": {"10.0.0.2:50052": ["%s%02d" % (name[-1], index) for index in range(2)]}} for name in names]


def test_a_release_is_named_after_its_model_and_its_bytes():
    sums = ["a" * 64, "b" * 64]
    name = releases.release_name("tiny", sums)
    assert name == "tiny-" + releases.digest(sums)[:12] and releases.is_release_name(name)
    assert releases.release_name("tiny", [value.upper() for value in sums]) == name  # the same bytes
    assert releases.release_name("tiny", list(reversed(sums))) != name  # another set
    assert not releases.is_release_name("tiny") and not releases.is_release_name("tiny-abc")


def test_a_switch_puts_the_new_model_first_and_keeps_the_ones_before_it():
    history = served(B, A)
    after = releases.after_switch(history, served(C)[0], keep=1)
    assert [item["name"] for item in after["history"]] == [C, B]
    assert after["cache_keep"] == {"10.0.0.2:50052": ["b00", "b01"]}
    # a switch back to a kept one moves it first, and keeps the one it replaces
    back = releases.after_switch(after["history"], served(B)[0], keep=1)
    assert [item["name"] for item in back["history"]] == [B, C]
    assert back["cache_keep"] == {"10.0.0.2:50052": ["c00", "c01"]}
    # none kept: the caches keep nothing of another model
    assert releases.after_switch(history, served(C)[0], keep=0) == {"history": served(C), "cache_keep": {}}


def test_the_same_model_deployed_again_is_not_kept_twice():
    history = served(A, B)
    assert [item["name"] for item in releases.after_switch(history, served(A)[0], keep=3)["history"]] == [A, B]


@pytest.mark.parametrize("asked, history, on_disk, expected", [
    ("previous", [B, A], [A, B], A),
    (A, [B, A], [A, B], A),
    (C, [B, A], [A, B, C], C),  # fetched once, never served: still a release on the master
    ("/srv/models/tiny.gguf", [B, "/srv/models/tiny.gguf"], [B], "/srv/models/tiny.gguf"),
])
def test_a_rollback_finds_the_model_by_name(asked, history, on_disk, expected):
    entries = [{"name": name, "kind": "path" if name.startswith("/") else "release"} for name in history]
    entry, problem = releases.resolve(asked, entries, on_disk)
    assert problem is None and entry["name"] == expected


@pytest.mark.parametrize("asked, history, on_disk, message", [
    ("previous", [A], [A], "rpc_master_model_release=previous: this master has served no model before " + A),
    ("previous", [], [], "has served no model before any"),
    (D, [B, A], [A, B], "rpc_master_model_release=%s is neither a release on this master nor a model it served. Kept for a "
                        "rollback: %s; releases on disk: %s, %s. Set it to one of those, or to previous." % (D, A, A, B)),
    ("previous", [B, A], [B], "rpc_master_model_release=previous: that release is no longer on this master"),
])
def test_a_rollback_to_what_is_not_there_is_refused_with_what_is(asked, history, on_disk, message):
    entry, problem = releases.resolve(asked, [{"name": name, "kind": "release"} for name in history], on_disk)
    assert entry is None and message in problem, problem


def test_after_a_switch_only_the_served_and_the_kept_stay():
    history = served(C, B)  # C serves now, B before it
    assert releases.prunable([A, B, C, D], history, keep=1) == [A, D]
    assert releases.prunable([A, B, C, D], history, keep=0) == [A, B, D]
    assert releases.prunable([A, B, C], history, keep=5) == [A]
    # a model path that points into a release by hand keeps that release
    by_hand = [{"name": "/m/%s/tiny.gguf" % D, "kind": "path", "model_path": "/m/%s/tiny.gguf" % D}]
    assert releases.prunable([A, D], by_hand, keep=0) == [A]


def test_a_fetch_may_remove_first_only_what_its_switch_would_remove():
    history = served(B, A)  # B serves, A kept
    # fetching C with one kept: after the switch C serves and B is kept, so A may go; B never (it serves now)
    assert releases.reclaimable([A, B], history, C, keep=1) == [A]
    assert releases.survivors(history, C, keep=1) >= {B, C}
    # with none kept, B still stays until the switch (its files are never touched before it)
    assert releases.reclaimable([A, B], history, C, keep=0) == [A]
    # with two kept, nothing goes
    assert releases.reclaimable([A, B], history, C, keep=2) == []


def test_the_space_a_fetch_needs():
    assert releases.space_problem(10, 10, "/m/.incoming/x", {}) is None
    problem = releases.space_problem(3e9, 1e9, "/m/.incoming/x", {B: 2.5e9})
    assert problem == ("The model needs 3.00 GB more in /m/.incoming/x, which has 1.00 GB free. The models kept for a rollback "
                       "hold %s 2.50 GB: lower rpc_master_models_kept to let the fetch remove them first. Free space there, "
                       "or set rpc_master_models_dir to a larger disk. Nothing was fetched." % B)


def test_releases_on_disk_are_the_whole_ones(tmp_path):
    def release(name, manifest):
        (tmp_path / name).mkdir()
        (tmp_path / name / "tiny.gguf").write_bytes(b"x" * 10)
        if manifest is not None:
            (tmp_path / name / releases.MANIFEST).write_text(json.dumps(manifest))
    part = {"file": "tiny.gguf", "sha256": "a" * 64, "size": 10}
    release(A, {"name": A, "base": "tiny", "parts": [part]})
    release(B, None)  # a removal cut short: no manifest
    release(C, {"name": D, "parts": [part]})  # renamed by hand
    release("notes", {"name": "notes", "parts": [part]})
    os.link(tmp_path / A / "tiny.gguf", tmp_path / "shared.gguf")
    assert sorted(releases.on_disk(tmp_path)) == [A]
    model = releases.as_model(str(tmp_path), {"name": A, "kind": "release"}, releases.on_disk(tmp_path)[A])
    assert model["kind"] == "path" and model["release"] == A and model["problems"] == []
    assert model["model_path"] == str(tmp_path / A / "tiny.gguf") and model["parts"][0]["sha256"] == "a" * 64
    # a part two releases share (a hard link) is counted once
    assert releases.unique_bytes([tmp_path / A / "tiny.gguf", tmp_path / "shared.gguf", tmp_path / B / "tiny.gguf"]) == 20
    releases.remove(str(tmp_path), A)
    assert not (tmp_path / A).exists() and (tmp_path / "shared.gguf").read_bytes() == b"x" * 10
