"""module_utils/model/fetch_holdings.py: what the master already holds of a model, by the record, and links to it."""

import os
import time

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import fetch_state
from tests.unit.plugins.module_utils.model.fetch_parts import fetch


def test_a_part_verified_in_another_release_is_linked_not_fetched(tmp_path):
    held = tmp_path / "old" / "m-00001-of-00002.gguf"
    held.parent.mkdir()
    held.write_bytes(b"part one")
    call = fetch(tmp_path)
    call.record[str(held)] = {"identity": fetch_state.identity(str(held)), "sha256": "aa"}
    (tmp_path / "new").mkdir()
    part = {"path": str(tmp_path / "new" / "m-00001-of-00002.gguf"), "sha256": "aa", "number": 1, "name": "m"}
    call.prepare(part)
    assert part["state"] == "verified" and part["verified"] == "linked" and part["link"] == str(held)
    call.link(part)
    assert os.path.samefile(part["path"], held) and call.recorded(part["path"], "aa")
    assert call.recorded(str(held), "aa"), "the link changed the inode's change time: the other name's record follows"


def test_a_write_that_puts_back_the_modification_time_is_seen(tmp_path):
    """The same size, modification time and inode, other bytes: only the status change time tells."""
    held = tmp_path / "m.gguf"
    held.write_bytes(b"part one")
    call = fetch(tmp_path)
    call.record[str(held)] = {"identity": fetch_state.identity(str(held)), "sha256": "aa"}
    before = held.stat()
    time.sleep(0.02)  # the change time ticks coarsely
    held.write_bytes(b"part two")
    os.utime(held, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = held.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    assert not call.recorded(str(held), "aa")


def test_a_file_changed_since_its_record_is_not_taken_for_verified(tmp_path):
    held = tmp_path / "m.gguf"
    held.write_bytes(b"part one")
    call = fetch(tmp_path)
    call.record[str(held)] = {"identity": fetch_state.identity(str(held)), "sha256": "aa"}
    assert call.recorded(str(held), "aa") and not call.recorded(str(held), "bb")
    held.write_bytes(b"part two, longer")
    assert not call.recorded(str(held), "aa")
    assert not fetch(tmp_path, recheck=True).recorded(str(held), "aa")


def test_a_part_with_nothing_held_is_downloaded_from_what_it_has(tmp_path):
    part = {"path": str(tmp_path / "m.gguf"), "sha256": "cc", "number": 1, "name": "m"}
    (tmp_path / "m.gguf.partial").write_bytes(b"1234")
    fetch(tmp_path).prepare(part)
    assert part["todo"] == "download" and part["have"] == 4
