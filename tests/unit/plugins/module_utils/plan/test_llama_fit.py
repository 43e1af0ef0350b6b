"""Reading llama.cpp's projection (llama-fit-params --fit-print on --log-jsonl) from its recorded output
(tests/unit/data/llama-fit-params/README.md), and running it: a stand-in program prints recorded output."""

import os
import stat
import subprocess
from pathlib import Path

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.plan import llama_fit

DATA = Path(__file__).resolve().parents[3] / "data" / "llama-fit-params"
ENDPOINTS = ["127.0.0.1:50201", "127.0.0.1:50202"]
MIB = 1 << 20


def recorded(name):
    return (DATA / name).read_text()


def run(argv, environ_update=None):
    """AnsibleModule.run_command's contract, for the tests."""
    done = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, **(environ_update or {})), check=False)
    return done.returncode, done.stdout, done.stderr


def test_devices_are_the_workers_and_the_master_has_its_repacked_weights():
    projected = llama_fit.parse(recorded("llama-3.1-70b-ngl70.stdout"), ENDPOINTS)
    # each figure is llama.cpp's whole MiB, taken as the next MiB up
    assert projected["workers"]["127.0.0.1:50201"] == {"model": 18161 * MIB, "context": 561 * MIB, "compute": 205 * MIB}
    assert projected["workers"]["127.0.0.1:50202"] == {"model": 18464 * MIB, "context": 545 * MIB, "compute": 267 * MIB}
    # Host (2657 MiB of weights) and CPU_REPACK (3613): the master's layers are repacked for its CPU
    assert projected["master"] == {"model": (2658 + 3614) * MIB, "context": (177 + 1) * MIB, "compute": (237 + 1) * MIB}
    assert projected["complete"]


def test_without_the_json_line_the_plain_table_serves_and_says_it_is_incomplete():
    """The logger can lose its last line at exit; the plain table (printf) is always there, without CPU_REPACK."""
    plain = "".join(line for line in recorded("llama-3.1-70b-ngl70.stdout").splitlines(True) if not line.startswith("{"))
    projected = llama_fit.parse(plain, ENDPOINTS)
    assert projected["workers"]["127.0.0.1:50202"]["model"] == 18464 * MIB
    assert projected["master"]["model"] == 2658 * MIB and not projected["complete"]


def test_devices_that_are_not_the_workers_are_refused():
    with pytest.raises(llama_fit.ProjectionError, match=r"lists devices RPC0 \(127.0.0.1:50201\), RPC1 \(127.0.0.1:50202\) "
                                                        r"for the workers 10.0.0.1:50052"):
        llama_fit.parse(recorded("llama-3.1-70b-ngl70.stdout"), ["10.0.0.1:50052"])


def test_no_breakdown_at_all():
    with pytest.raises(llama_fit.ProjectionError, match="printed no memory breakdown"):
        llama_fit.parse(recorded("not-a-model.stdout"), ENDPOINTS)


def test_the_command_is_llama_servers_settings():
    argv = llama_fit.command("/opt/llama.cpp/current/bin/llama-fit-params", "/m/model-00001-of-00004.gguf", ENDPOINTS, 999,
                             [21504, 21504], 16384, 4, "auto")
    assert argv == ["/opt/llama.cpp/current/bin/llama-fit-params", "--fit-print", "on", "--log-jsonl", "-m",
                    "/m/model-00001-of-00004.gguf", "-ngl", "999", "-c", "16384", "-np", "4", "-fa", "auto",
                    "--rpc", "127.0.0.1:50201,127.0.0.1:50202", "-ts", "21504,21504"]
    # the master alone: no --rpc, no -ts
    assert "--rpc" not in llama_fit.command("p", "m", [], 0, [], 4096, 1)


def stand_in(tmp_path, stdout_file, stderr_file=None, code=0, lose_json_times=0):
    """A program that prints recorded output, losing the JSON line the first lose_json_times runs."""
    counter = tmp_path / "runs"
    script = tmp_path / "llama-fit-params"
    script.write_text(f"""#!/bin/sh
n=$(cat {counter} 2>/dev/null || echo 0); echo $((n + 1)) > {counter}
if [ "$n" -lt {lose_json_times} ]; then grep -v '^{{' {DATA / stdout_file}; else cat {DATA / stdout_file}; fi
{f'cat {DATA / stderr_file} >&2' if stderr_file else ''}
exit {code}
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script), counter


def test_a_run_that_lost_its_json_line_is_repeated(tmp_path):
    program, counter = stand_in(tmp_path, "llama-3.1-70b-ngl70.stdout", lose_json_times=2)
    projected = llama_fit.project(run, program, "m", ENDPOINTS, 70, [1, 1], 4096, 1)
    assert projected["complete"] and counter.read_text().strip() == "3"
    (tmp_path / "again").mkdir()
    program, counter = stand_in(tmp_path / "again", "llama-3.1-70b-ngl70.stdout", lose_json_times=9)
    projected = llama_fit.project(run, program, "m", ENDPOINTS, 70, [1, 1], 4096, 1)
    assert not projected["complete"] and counter.read_text().strip() == str(llama_fit.ATTEMPTS)


def test_a_failed_projection_whose_log_lost_the_reason_is_repeated(tmp_path):
    """An uncaught exception can end llama-fit-params before its logger's thread wrote llama.cpp's reason: only the
    exception's words are left, so the run is repeated until the reason comes (or the attempts are spent)."""
    counter = tmp_path / "runs"
    script = tmp_path / "llama-fit-params"
    script.write_text(f"""#!/bin/sh
n=$(cat {counter} 2>/dev/null || echo 0); echo $((n + 1)) > {counter}
[ "$n" -ge 1 ] && echo '{{"level":"E","msg":"llama_model_load: error loading model: tensor blk.0.ffn_up.weight has wrong shape"}}'
echo "terminate called after throwing an instance of 'std::runtime_error'" >&2
echo '  what():  failed to load model' >&2
exit 134
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    wrong_shape = r"failed \(exit 134\): .*llama_model_load: error loading model: tensor blk.0.ffn_up.weight has wrong shape"
    with pytest.raises(llama_fit.ProjectionError, match=wrong_shape):
        llama_fit.project(run, str(script), "m", ENDPOINTS, 70, [1, 1], 4096, 1)
    assert counter.read_text().strip() == "2"


def test_a_failed_projection_says_llama_cpps_reason(tmp_path):
    program, _counter = stand_in(tmp_path, "not-a-model.stdout", "not-a-model.stderr", code=134)
    with pytest.raises(llama_fit.ProjectionError, match=r"failed \(exit 134\): .*failed to load model"):
        llama_fit.project(run, program, "m", ENDPOINTS, 70, [1, 1], 4096, 1)
    with pytest.raises(llama_fit.ProjectionError, match=r"failed \(exit 127\)"):  # timeout's exit for a missing program
        llama_fit.project(run, os.path.join(tmp_path, "missing"), "m", ENDPOINTS, 70, [1, 1], 4096, 1)
