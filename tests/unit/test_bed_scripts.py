"""Bad input to the test bed fails at once with a message that says what to do (real processes, no stubs)."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOST_SH = ROOT / "tests" / "bed" / "host.sh"


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to an unprivileged user needs root")
def test_not_root_and_no_docker_says_what_is_missing(tmp_path):
    tmp_path.chmod(0o777)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "DOCKER_HOST": f"unix://{tmp_path}/none.sock"}
    result = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", str(HOST_SH)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "needs a Docker daemon" in result.stderr
    assert "sudo make test" in result.stderr and "docker' group" in result.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("dockerd"), reason="needs root and dockerd")
def test_dockerd_that_does_not_come_up_shows_its_log(tmp_path):
    socket = tmp_path / "docker.sock"
    missing_config = tmp_path / "no-such-daemon.json"
    env = dict(os.environ,
               DOCKER_HOST=f"unix://{socket}",
               LLAMA_RPC_CACHE=str(tmp_path / "cache"),
               LLAMA_RPC_DOCKERD_ARGS=f"--host unix://{socket} --config-file {missing_config}")
    result = subprocess.run(["bash", str(HOST_SH)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode != 0
    assert "dockerd did not come up" in result.stderr
    # the daemon's own words, from its log, name what is wrong
    assert str(missing_config) in result.stderr


def test_make_role_knows_every_role_and_refuses_another_by_name():
    """make role ROLE=<name>: every role of the collection (but the internal _common) has its entry, and each file it
    runs exists; an unknown role is refused with the list, before anything is set up."""
    script = ROOT / "tests" / "bed" / "role.sh"
    roles = sorted(path.name for path in (ROOT / "roles").iterdir() if path.is_dir() and not path.name.startswith("_"))
    result = subprocess.run(["bash", str(script), "no_such_role"], capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode != 0 and f"one of: {' '.join(roles)} (got 'no_such_role')" in result.stderr, result.stderr
    text = script.read_text()
    for role in roles:
        assert (ROOT / "tests" / "integration" / "bad_input" / f"test_{role}.py").exists(), role
    listed = [word for line in text.splitlines() if re.match(r"\s*\[\w+\]=\"", line)
              for quoted in line.split('"')[1::2] for word in quoted.split()]
    assert "tests/integration/test_rpc_tunnel.py" in listed
    for path in listed:
        assert (ROOT / path).exists(), path
