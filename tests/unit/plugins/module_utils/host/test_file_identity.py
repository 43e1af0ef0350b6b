"""module_utils/host/file_identity.py on real files: what changes a file's identity (every change a user or a copy
can make, even one that puts the times back) and what does not (a read), and the strict comparison with a record."""

import os
import shutil
import time

from ansible_collections.graviton.llama_rpc.plugins.module_utils.host import file_identity


def tick():
    time.sleep(0.02)  # status change times tick coarsely (a few ms)


def test_a_read_keeps_the_identity_and_every_change_moves_it(tmp_path):
    path = tmp_path / "part.gguf"
    path.write_bytes(b"weights one")
    first = file_identity.identity(str(path))
    path.read_bytes()
    assert file_identity.identity(str(path)) == first, "a read changed the identity"
    seen = os.stat(path)

    tick()
    path.write_bytes(b"weights two")  # the same size, its times put back (touch -r)
    os.utime(path, ns=(seen.st_atime_ns, seen.st_mtime_ns))
    rewritten = file_identity.identity(str(path))
    assert rewritten[:3] == first[:3] and rewritten != first, "only the status change time tells, and it does"

    tick()
    copy = tmp_path / "kept.gguf"
    shutil.copy2(path, copy)  # removed and copied back with its times (cp -p)
    path.unlink()
    shutil.copy2(copy, path)
    os.utime(path, ns=(seen.st_atime_ns, seen.st_mtime_ns))
    assert file_identity.identity(str(path)) != rewritten

    for change in (lambda: os.chmod(path, 0o600), lambda: os.link(path, tmp_path / "other-name")):
        before = file_identity.identity(str(path))
        tick()
        change()
        assert file_identity.identity(str(path)) != before


def test_a_record_vouches_only_for_a_file_that_changed_strictly_before_it(tmp_path):
    part, record = tmp_path / "part.gguf", tmp_path / "record.json"
    part.write_bytes(b"weights")
    tick()
    record.write_text("{}")
    assert not file_identity.changed_since(os.stat(part), os.stat(record))
    tick()
    part.write_bytes(b"weights, later")
    assert file_identity.changed_since(os.stat(part), os.stat(record))
    # the same tick is not known to come before: a file is not vouched for by a record of its own change time
    assert file_identity.changed_since(os.stat(record), os.stat(record))
