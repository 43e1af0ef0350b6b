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
    """make role ROLE=<name>: every role of the collection (but the internal common) has its entry, and each file it
    runs exists; an unknown role is refused with the list, before anything is set up."""
    script = ROOT / "tests" / "bed" / "role.sh"
    roles = sorted(path.name for path in (ROOT / "roles").iterdir() if path.is_dir() and path.name != "common")
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


@pytest.mark.parametrize("wall, before, after, expected", [
    (2916, "0.91", "1.09", 875),  # a slow hour: 48.6 min of wall is 14.6 min at the best hour
    (1051, "0.31", "0.31", 1017),  # the best hour itself
    (4465, "0.43", "0.64", 2504),
])
def test_a_runs_time_is_judged_at_the_machines_best_hour(wall, before, after, expected):
    """make test's last lines: its wall time scaled by the best hour's fixed work (0.30 CPU-s) over the one measured
    around the run; and the machine's CPU-seconds, a count that only grows."""
    normalized = subprocess.run(["bash", "-c", f". {ROOT}/tests/bed/lib.sh && normalized_seconds {wall} {before} {after}"],
                                capture_output=True, text=True, check=True).stdout.strip()
    assert int(normalized) == expected
    counts = [int(subprocess.run(["bash", "-c", f". {ROOT}/tests/bed/lib.sh && machine_cpu_seconds"], capture_output=True,
                                 text=True, check=True).stdout) for _look in range(2)]
    assert 0 < counts[0] <= counts[1]
