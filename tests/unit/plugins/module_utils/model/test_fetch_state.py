"""module_utils/model/fetch_state.py: what a fetch keeps on the master, and when a call must stop."""

import os
import time

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import fetch_state
from tests.unit.plugins.module_utils.model.fetch_parts import fetch


def test_a_files_identity_and_the_sources_key_keep_no_credential():
    key = fetch_state.source_key([{"src": "https://h/p?X-Amz-Signature=secret"}], "")
    assert len(key) == 64 and "secret" not in key
    assert key != fetch_state.source_key([{"src": "https://h/other"}], "")


def test_the_record_and_the_failed_attempts_survive_the_call(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"weights")
    first = fetch(tmp_path)
    first.record[str(model)] = {"identity": fetch_state.identity(str(model)), "sha256": "ab"}
    first.failures["p"] = 2
    first.save()
    again = fetch(tmp_path)
    assert again.record == first.record and again.failures == {"p": 2}
    assert fetch(tmp_path, run_id="run-2").failures == {}, "a new transfer starts with no failed attempt"


def test_a_lease_not_renewed_ends_the_call_and_marks_it_abandoned(tmp_path):
    lease = tmp_path / "fetch.lease"
    lease.write_text("")
    call = fetch(tmp_path, lease_file=str(lease), lease_seconds=15)
    call.deadline = time.monotonic() + 60
    assert not call.time_up()
    old = time.time() - 30
    os.utime(lease, (old, old))
    assert call.time_up() and call.abandoned


def test_the_free_space_of_a_directory_not_made_yet_is_its_parents(tmp_path):
    assert fetch_state.free_bytes(str(tmp_path / "not" / "yet")) == fetch_state.free_bytes(str(tmp_path)) > 0
