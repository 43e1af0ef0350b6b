"""module_utils/model/sha256_job.py: a file's sha256 by a process that outlives the call that started it, polled for its
progress, and named as gone when it died without a result."""

import hashlib
import os
import subprocess
import sys
import time

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
