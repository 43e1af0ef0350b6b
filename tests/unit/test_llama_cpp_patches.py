"""The collection's patches to llama.cpp (roles/llama_build/files/patches/<tag>/<name>.patch) against the tag
each is written for: the pinned source of the test archive (tests/bed/sources.sh). Each applies whole with no fuzz and
touches only the files it names; that it builds, and what a build with it does, is tests/integration/test_hash_ahead.py's."""

import os
import re
import shutil
import subprocess
import tarfile

import pytest

from tests.tools import llama_cpp
from tests.unit.plugins.module_utils.input_rules.rules import ROOT, defaults

PATCHES = ROOT / "roles" / "llama_build" / "files" / "patches"
ARCHIVE = os.environ.get("LLAMA_RPC_TEST_ARCHIVE", "")
SUBDIR = os.environ.get("LLAMA_RPC_TEST_ARCHIVE_SUBDIR", "")


def patch_files():
    return sorted(PATCHES.glob("*/*.patch"))


def touched(patch):
    return sorted(set(re.findall(r"^\+\+\+ b/(\S+)", patch.read_text(), re.M)))


@pytest.mark.parametrize("patch", patch_files(), ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_each_patch_applies_to_its_release_exactly(patch, tmp_path):
    if not (ARCHIVE and os.path.exists(ARCHIVE)):
        pytest.fail("the pinned llama.cpp source (LLAMA_RPC_TEST_ARCHIVE) is not there: run through make test or make units")
    if shutil.which("patch") is None:
        pytest.fail("no patch program: install it (apt-get install patch; make test's host setup does)")
    # the test archive is the pinned release; a patch for another release cannot be checked against it
    assert patch.parent.name == defaults("llama_build")["llama_build_version"], "a patch for a release nothing pins"
    files = touched(patch)
    assert files and all(name.startswith(("ggml/", "src/")) for name in files), files
    with tarfile.open(ARCHIVE) as archive:
        for name in files:
            target = tmp_path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.extractfile(f"{SUBDIR}/{name}").read())
    applied = subprocess.run(["patch", "--batch", "--forward", "--fuzz=0", "-p1", "-d", str(tmp_path), "-i", str(patch)],
                             capture_output=True, text=True, check=False)
    assert applied.returncode == 0 and "offset" not in applied.stdout, applied.stdout + applied.stderr
    # and comes off again, leaving the release as it was
    reverted = subprocess.run(["patch", "--batch", "-R", "--fuzz=0", "-p1", "-d", str(tmp_path), "-i", str(patch)],
                              capture_output=True, text=True, check=False)
    assert reverted.returncode == 0, reverted.stdout + reverted.stderr
    with tarfile.open(ARCHIVE) as archive:
        for name in files:
            assert (tmp_path / name).read_bytes() == archive.extractfile(f"{SUBDIR}/{name}").read(), name


def test_the_hash_ahead_patch_keeps_the_hash_and_the_messages():
    """What makes a stock worker serve the patched master and write the same cache files: the patch adds no RPC command,
    changes no message and leaves fnv_hash as it is (its only hash is that function)."""
    text = (PATCHES / "b11312" / "rpc_hash_ahead.patch").read_text()
    removed = [line[1:] for line in text.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in text.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert not any("RPC_CMD_" in line or "struct rpc_msg" in line or "RPC_PROTO" in line for line in removed + added)
    assert not any("fnv_prime" in line or "0xcbf29ce484222325" in line for line in removed + added)
    assert [line.strip() for line in removed] == ["request->hash = fnv_hash((const uint8_t*)data, size);"] * 2
    assert "GGML_RPC_LOAD_THREADS" in text


def test_the_known_hashes_patch_keeps_the_hash_and_the_messages():
    """A stock worker serves a master with rpc_known_hashes and writes the same cache files: the patch adds no RPC
    command and changes no message or hash; the commands its lanes send are stock's, SET_TENSOR_HASH then, on a miss,
    SET_TENSOR with the cache flag; the record it reads is the one gguf_tensor_hashes writes (its version and keys)."""
    text = (PATCHES / "b11312" / "rpc_known_hashes.patch").read_text()
    removed = [line[1:] for line in text.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in text.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert not any("enum rpc_cmd" in line or "struct rpc_msg" in line or "RPC_PROTO" in line or "RPC_CMD_" in line
                   for line in removed)
    # FNV-1a's constants appear only in the record's digest (record_digest), never in a tensor's hash
    assert not any(("fnv_prime" in line or "0xcbf29ce484222325" in line) and "digest" not in line for line in removed + added)
    sent = sorted(set(re.findall(r"RPC_CMD_[A-Z_]+", "\n".join(added))))
    assert sent == ["RPC_CMD_SET_TENSOR", "RPC_CMD_SET_TENSOR_HASH"], sent
    assert "cache_flag = 1;" in "\n".join(added)
    from ansible_collections.graviton.llama_rpc.plugins.modules import gguf_tensor_hashes
    assert "identity[0] != %d" % gguf_tensor_hashes.MANIFEST_VERSION in "\n".join(added)
    for key in ('"identity"', '"tensors"', '"path"', '"offset"', '"size"', '"hash"', '"digest"'):
        assert 'at(%s)' % key in "\n".join(added), key
    assert "GGML_RPC_HASH_RECORD" in text


def test_the_lost_worker_patch_names_the_endpoint_and_fails_the_send_instead_of_sigpipe():
    """rpc_lost_worker: the dispatcher keeps its endpoint and its abort names it; a send to a worker that is gone does
    not raise SIGPIPE; no command or message changes. rpc_known_hashes leaves all of that to it."""
    text = (PATCHES / "b11312" / "rpc_lost_worker.patch").read_text()
    text = text[text.index("\n--- a/"):]
    added = "\n".join(line[1:] for line in text.splitlines() if line.startswith("+") and not line.startswith("+++"))
    assert "RPC_CMD_" not in added and "RPC_PROTO" not in added
    assert 'GGML_ABORT("Remote RPC server %s crashed or returned malformed response", endpoint.c_str());' in added
    assert "MSG_NOSIGNAL);" in added
    known = (PATCHES / "b11312" / "rpc_known_hashes.patch").read_text()
    assert "MSG_NOSIGNAL" not in known and "transport.cpp" not in known.split("\n--- a/", 1)[1]


def test_the_cache_check_patch_changes_only_the_workers_answer_to_a_hash():
    """rpc_cache_check: removes nothing, adds no command, and its one change is in rpc_server::set_tensor_hash, where a
    file whose bytes do not hash (llama.cpp's own fnv_hash) to the name asked for answers as a missing one does."""
    text = (PATCHES / "b11312" / "rpc_cache_check.patch").read_text()
    text = text[text.index("\n--- a/"):]
    removed = [line for line in text.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = "\n".join(line[1:] for line in text.splitlines() if line.startswith("+") and not line.startswith("+++"))
    assert removed == [] and "RPC_CMD_" not in added and "RPC_PROTO" not in added
    assert touched(PATCHES / "b11312" / "rpc_cache_check.patch") == ["ggml/src/ggml-rpc/ggml-rpc.cpp"]
    assert "if (fnv_hash(cached_file.data(), size) != request.hash) {" in added
    assert "response.result = 0;\n        return true;" in added
    # the hunk sits in the worker's set_tensor_hash, after the file is read
    source = llama_cpp.pinned_source_file("ggml/src/ggml-rpc/ggml-rpc.cpp")
    start = int(re.search(r"^@@ -(\d+),", text, re.M).group(1))
    before = source.splitlines()[:start + 3]
    assert "bool rpc_server::set_tensor_hash(" in "\n".join(before[-15:]), before[-15:]


def test_the_tensor_parallel_patch_keeps_the_messages_and_offers_the_meta_backends_hook():
    """A stock worker serves a master with rpc_tensor_parallel: no RPC command added, no message or hash changed; it
    offers ggml-backend-meta.cpp's allreduce hook under the names the meta backend asks for, and a 2-D set."""
    text = (PATCHES / "b11312" / "rpc_tensor_parallel.patch").read_text()
    text = text[text.index("\n--- a/"):]  # the diff, after the header's own dashes
    removed = [line[1:] for line in text.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = "\n".join(line[1:] for line in text.splitlines() if line.startswith("+") and not line.startswith("+++"))
    assert [line.strip() for line in removed] == ["/* .set_tensor_2d   = */ NULL,"]
    assert "RPC_CMD_" not in added and "RPC_PROTO" not in added and "fnv" not in added.lower()
    for hook in ("ggml_backend_comm_init", "ggml_backend_comm_free", "ggml_backend_comm_allreduce_tensor"):
        assert 'std::strcmp(name, "%s") == 0' % hook in added, hook
    assert "/* .set_tensor_2d   = */ ggml_backend_rpc_buffer_set_tensor_2d," in added
    # the names the pinned meta backend looks the hook up by
    meta = llama_cpp.pinned_source_file("ggml/src/ggml-backend-meta.cpp")
    for hook in ("ggml_backend_comm_init", "ggml_backend_comm_free", "ggml_backend_comm_allreduce_tensor"):
        assert '"%s"' % hook in meta, hook
