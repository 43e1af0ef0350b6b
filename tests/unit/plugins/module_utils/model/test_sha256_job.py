"""module_utils/model/sha256_job.py: a file's sha256 by a process that outlives the call that started it, polled for its
progress, and named as gone when it died without a result."""

import hashlib
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import sha256_job


class Runner:
    """What sha256_job.start needs of AnsibleModule: run_command."""

    @staticmethod
    def run_command(args):
        done = subprocess.run(args, capture_output=True, text=True, check=False)
        return done.returncode, done.stdout, done.stderr


def wait_for(out, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        state = sha256_job.poll(out)
        if state and not state["running"]:
            return state
        time.sleep(0.05)
    raise AssertionError("the job reported no result in %d s: %r" % (seconds, sha256_job.poll(out)))


def save_record(record, prefix, total):
    """Replaces the ranges' record whole, as fetch_ranges.save does: a job reading it never sees it half written."""
    record.with_suffix(".tmp").write_text(json.dumps({"prefix": prefix, "total": total}))
    os.replace(record.with_suffix(".tmp"), record)


def test_a_detached_job_hashes_the_whole_file(tmp_path):
    part = tmp_path / "part.gguf"
    part.write_bytes(os.urandom(3 * sha256_job.BLOCK + 17))  # more than one block, and a short last one
    out = str(tmp_path / "part.sha256.json")
    assert sha256_job.start(Runner(), str(part), out) is None  # returns at once, the child hashes
    state = wait_for(out)
    assert state["sha256"] == hashlib.sha256(part.read_bytes()).hexdigest()
    assert state["done"] == state["size"] == part.stat().st_size and "error" not in state


def test_a_file_that_cannot_be_read_is_an_error_not_a_hash(tmp_path):
    out = str(tmp_path / "gone.json")
    sha256_job.hash_file(str(tmp_path / "gone.gguf"), out)
    state = sha256_job.poll(out)
    assert "No such file" in state["error"] and "sha256" not in state and state["running"] is False


def test_no_report_is_none_and_a_dead_process_is_not_running(tmp_path):
    out = tmp_path / "job.json"
    assert sha256_job.poll(str(out)) is None
    out.write_text("not json")
    assert sha256_job.poll(str(out)) is None
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    out.write_text('{"pid": %d, "done": 5, "size": 10}' % int(dead.stdout))
    assert sha256_job.poll(str(out)) == {"pid": int(dead.stdout), "done": 5, "size": 10, "running": False}
    out.write_text('{"pid": %d, "done": 5, "size": 10}' % os.getpid())
    assert sha256_job.poll(str(out))["running"] is True


def test_a_hash_follows_a_download_as_its_bytes_land_from_the_start_on(tmp_path):
    """The record says how many bytes have landed from the start on: the job reads no further, waits for more, and
    reports the hash of the whole file with the identity it had when read last."""
    data = os.urandom(3 * sha256_job.BLOCK + 17)
    part, record, out = tmp_path / "part.gguf.partial", tmp_path / "part.gguf.partial.ranges", tmp_path / "hash.json"
    with open(part, "wb") as handle:
        handle.truncate(len(data))  # a ranged download's file: its full size, zeros where nothing landed yet
    save_record(record, 0, len(data))
    assert sha256_job.start(Runner(), str(part), str(out), str(record)) is None
    for landed in (sha256_job.BLOCK + 5, 2 * sha256_job.BLOCK, len(data)):
        with open(part, "r+b") as handle:
            handle.write(data[:landed])
        time.sleep(0.3)
        assert (sha256_job.poll(str(out)) or {}).get("running", True), sha256_job.poll(str(out))
        save_record(record, landed, len(data))
    state = wait_for(str(out))
    assert state.get("sha256") == hashlib.sha256(data).hexdigest() and state["done"] == len(data), state
    seen = part.stat()
    assert state["identity"] == [seen.st_ino, seen.st_size, seen.st_mtime_ns, seen.st_ctime_ns]


@pytest.mark.parametrize("fault, error", [
    ("started again", "the download it followed started again"),
    ("record gone", "the download it followed started again"),
    ("idle", "nothing landed for 1 s"),
    ("given up", "the download it followed was given up"),
])
def test_a_hash_that_follows_stops_when_its_download_does(tmp_path, fault, error):
    part, record, out = tmp_path / "part.partial", tmp_path / "part.partial.ranges", str(tmp_path / "hash.json")
    part.write_bytes(os.urandom(1 << 20))
    save_record(record, 1 << 19, 1 << 20)
    lease = tmp_path / "lease"
    lease.touch()
    os.utime(lease, (time.time() - (60 if fault == "given up" else 0),) * 2)  # its run's controller gone a minute
    idle = 1 if fault == "idle" else 30
    follower = threading.Thread(target=sha256_job.follow_file, args=(str(part), out, str(record), "%s:15" % lease, idle))
    follower.start()
    time.sleep(0.5)
    if fault == "started again":
        save_record(record, 0, 1 << 20)
    elif fault == "record gone":
        record.unlink()
    follower.join(10)
    state = sha256_job.poll(out)
    assert state["error"] == error and "sha256" not in state, state
