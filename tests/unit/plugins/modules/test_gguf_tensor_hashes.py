"""gguf_tensor_hashes with real parts: a real GGUF file and the tensor cache's C helper compiled from the role's source.
The names are llama.cpp's hash of each tensor's bytes at its offset; the manifest spares a re-run any read while the
file is unchanged, a changed file is hashed again, check mode writes nothing, and a failing helper is named."""

import json
import os
import shutil
import time

from ansible_collections.graviton.llama_rpc.plugins.module_utils.host import file_identity
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import tensor_cache
from ansible_collections.graviton.llama_rpc.plugins.modules import gguf_tensor_hashes

from tests.tools.llama_cpp import fnv1a64
from tests.unit.plugins.module_runner import run_module


def test_each_name_is_llama_cpps_hash_of_the_tensors_bytes(tool, model, tmp_path, capsys):
    result = run_module(gguf_tensor_hashes.main, capsys, path=str(model), tool=tool, manifest=str(tmp_path / "m.json"))
    assert result["changed"] and len(result["tensors"]) == 6
    assert result["hashed_bytes"] == sum(tensor["size"] for tensor in result["tensors"])
    with open(model, "rb") as handle:
        for tensor in result["tensors"][:1]:  # Python's FNV takes seconds per 11 MB tensor
            handle.seek(tensor["offset"])
            assert fnv1a64(handle.read(tensor["size"])) == tensor["hash"], tensor["name"]
    record = json.loads((tmp_path / "m.json").read_text())
    assert record["tensors"] == result["tensors"]
    assert record["digest"] == tensor_cache.record_digest(result["tensors"])


def test_several_processes_give_the_hashes_one_gives(tool, model, tmp_path, capsys):
    """The tensors cut into runs, each hashed by its own process, all at once: the same record as one process."""
    one = run_module(gguf_tensor_hashes.main, capsys, path=str(model), tool=tool, manifest=str(tmp_path / "1.json"), jobs=1)
    several = run_module(gguf_tensor_hashes.main, capsys, path=str(model), tool=tool, manifest=str(tmp_path / "4.json"),
                         jobs=4)
    assert several["tensors"] == one["tensors"] and len(one["tensors"]) == 6
    refused = run_module(gguf_tensor_hashes.main, capsys, path=str(model), tool=tool, manifest=str(tmp_path / "0.json"),
                         jobs=0)
    assert refused["failed"] and refused["msg"] == ("jobs is 0: give how many hashing processes run at once (1 or more), "
                                                    "or leave it out for one per CPU.")
    assert not (tmp_path / "0.json").exists()
    missing = run_module(gguf_tensor_hashes.main, capsys, path=str(model), tool=str(tmp_path / "gone"),
                         manifest=str(tmp_path / "0.json"))
    assert missing["failed"] and missing["msg"] == ("the hashing helper %s is not an executable file: give the "
                                                    "llama-rpc-cache program of the llama_build role's build." % (tmp_path / "gone"))


def test_the_runs_share_the_bytes_and_never_cross_a_part():
    tensors = [{"path": path, "size": size} for path, size in
               (("a", 40), ("a", 40), ("a", 40), ("a", 40), ("b", 10), ("b", 30), ("c", 200))]
    runs = gguf_tensor_hashes.hash_runs(tensors, 4)  # a share: 100 bytes
    assert [[(t["path"], t["size"]) for t in run] for run in runs] == [
        [("a", 40), ("a", 40), ("a", 40)], [("a", 40)], [("b", 10), ("b", 30)], [("c", 200)]]
    assert gguf_tensor_hashes.hash_runs(tensors, 1) == [tensors[:4], tensors[4:6], tensors[6:]]
    assert [len(run) for run in gguf_tensor_hashes.hash_runs(tensors, 10_000)] == [1] * 7


def test_the_manifest_spares_a_rerun_and_a_changed_file_is_hashed_again(tool, model, tmp_path, capsys):
    copy = tmp_path / "big.gguf"
    shutil.copyfile(model, copy)
    manifest = str(tmp_path / "m.json")
    first = run_module(gguf_tensor_hashes.main, capsys, path=str(copy), tool=tool, manifest=manifest)
    again = run_module(gguf_tensor_hashes.main, capsys, path=str(copy), tool=tool, manifest=manifest)
    assert not again["changed"] and again["seconds"] == 0 and again["tensors"] == first["tensors"]
    last = first["tensors"][-1]
    with open(copy, "r+b") as handle:  # other weights in the last tensor, same size
        handle.seek(last["offset"])
        handle.write(os.urandom(4096))
    changed = run_module(gguf_tensor_hashes.main, capsys, path=str(copy), tool=tool, manifest=manifest)
    assert changed["changed"] and changed["tensors"][-1]["hash"] != last["hash"]
    assert changed["tensors"][:-1] == first["tensors"][:-1]


def test_a_part_changed_after_the_manifest_keeping_its_times_is_hashed_again(tool, model, tmp_path, capsys):
    """A write that puts back the modification time (touch -r) leaves size, time and inode as they were: only the
    status change time tells, and the manifest is made again (the patched llama.cpp trusts it on the same terms)."""
    copy = tmp_path / "big.gguf"
    shutil.copyfile(model, copy)
    manifest = str(tmp_path / "m.json")
    first = run_module(gguf_tensor_hashes.main, capsys, path=str(copy), tool=tool, manifest=manifest)
    before = os.stat(copy)
    last = first["tensors"][-1]
    time.sleep(0.05)  # status change times tick coarsely (a few ms): a change in the manifest's tick would pass
    with open(copy, "r+b") as handle:
        handle.seek(last["offset"])
        handle.write(os.urandom(4096))
    os.utime(copy, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(copy)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    again = run_module(gguf_tensor_hashes.main, capsys, path=str(copy), tool=tool, manifest=manifest)
    assert again["changed"] and again["tensors"][-1]["hash"] != last["hash"]


def changing_tool(tool, tmp_path, model, times):
    """A hash helper that, the first `times` runs, rewrites the model's last bytes and puts its modification time back
    (a write during the hash that a size, time and inode check cannot see), then hashes as the real one does."""
    script = tmp_path / "changing-tool"
    script.write_text(f"""#!/bin/sh
count=$(cat {tmp_path}/runs 2>/dev/null || echo 0); echo $((count + 1)) > {tmp_path}/runs
if [ "$count" -lt {times} ]; then
  mtime=$(stat -c %y {model}); sleep 0.02
  printf 'changed%s' "$count" | dd of={model} bs=1 seek=$(($(stat -c %s {model}) - 8)) conv=notrunc 2>/dev/null
  touch -d "$mtime" {model}
fi
exec {tool} "$@"
""")
    script.chmod(0o755)
    return str(script)


def test_a_part_rewritten_during_its_hash_is_hashed_again_and_the_record_is_of_what_was_hashed(
        tool, model, tmp_path, capsys):
    copy = tmp_path / "big.gguf"
    shutil.copyfile(model, copy)
    manifest = tmp_path / "m.json"
    result = run_module(gguf_tensor_hashes.main, capsys, path=str(copy), tool=changing_tool(tool, tmp_path, copy, 1),
                        manifest=str(manifest), jobs=1)
    assert result["changed"] and (tmp_path / "runs").read_text().strip() == "2", "hashed once more after the change"
    fresh = run_module(gguf_tensor_hashes.main, capsys, path=str(copy), tool=tool, manifest=str(tmp_path / "fresh.json"))
    assert result["tensors"] == fresh["tensors"], "the record is of the bytes as they are now"
    assert json.loads(manifest.read_text())["identity"][1][1:] == file_identity.identity(str(copy))


def test_a_part_that_changes_under_every_hash_is_refused_and_no_record_is_written(tool, model, tmp_path, capsys):
    copy = tmp_path / "big.gguf"
    shutil.copyfile(model, copy)
    manifest = tmp_path / "m.json"
    result = run_module(gguf_tensor_hashes.main, capsys, path=str(copy), tool=changing_tool(tool, tmp_path, copy, 99),
                        manifest=str(manifest))
    assert result["failed"] and result["msg"] == (
        "the model's parts (%s) changed while they were hashed, 3 times in a row: something writes them. Let it finish "
        "(a download or a copy), then run again; no record was written." % copy)
    assert not manifest.exists()


def test_check_mode_hashes_but_writes_no_manifest(tool, model, tmp_path, capsys):
    result = run_module(gguf_tensor_hashes.main, capsys, path=str(model), tool=tool, manifest=str(tmp_path / "m.json"),
                        _ansible_check_mode=True)
    assert not result["changed"] and len(result["tensors"]) == 6 and not (tmp_path / "m.json").exists()


def test_a_file_that_is_not_gguf_and_a_failing_helper_are_named(model, tmp_path, capsys):
    text = tmp_path / "notes.gguf"
    text.write_text("not a model")
    result = run_module(gguf_tensor_hashes.main, capsys, path=str(text), tool="/bin/false", manifest=str(tmp_path / "m.json"))
    assert result["failed"] and result["msg"].startswith("cannot read the model:")
    result = run_module(gguf_tensor_hashes.main, capsys, path=str(model), tool="/bin/false", manifest=str(tmp_path / "m.json"))
    assert result["failed"] and result["msg"] == "hashing %s failed: 1" % model


def test_a_manifest_cut_short_or_edited_is_written_again(tool, model, tmp_path, capsys):
    """The digest of its tensors' lines: a record whose tensors were edited by hand (a hash swapped) no longer matches
    it, and is not reused (nor trusted by the patched llama.cpp)."""
    copy = tmp_path / "big.gguf"
    shutil.copyfile(model, copy)
    manifest = tmp_path / "m.json"
    first = run_module(gguf_tensor_hashes.main, capsys, path=str(copy), tool=tool, manifest=str(manifest))
    record = json.loads(manifest.read_text())
    record["tensors"][0]["hash"], record["tensors"][1]["hash"] = record["tensors"][1]["hash"], record["tensors"][0]["hash"]
    manifest.write_text(json.dumps(record))
    again = run_module(gguf_tensor_hashes.main, capsys, path=str(copy), tool=tool, manifest=str(manifest))
    assert again["changed"] and again["tensors"] == first["tensors"]
    assert tensor_cache.record_digest(record["tensors"]) != record["digest"]
    manifest.write_text(manifest.read_text()[:100])
    assert run_module(gguf_tensor_hashes.main, capsys, path=str(copy), tool=tool, manifest=str(manifest))["changed"]
