"""The master: one-shot inference through both workers, llama-server with its API key, recovery after a
worker dies, and a pre-flight that refuses bad clusters (another build, a stopped worker, a busy
worker, a model larger than the cluster) with its intended message and without running anything."""

import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import testinfra
import testinfra.utils.ansible_runner
import yaml

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
testinfra_hosts = RUNNER.get_hosts("llama_master")
ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
RESULTS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "results"
KEY = "molecule-test-key"
WORKER_UNIT = "llama-rpc-worker@main.service"

# Runs on the master: POST /completion, print the status and the body.
CLIENT = """
import json, sys, urllib.request, urllib.error
url, key = sys.argv[1], sys.argv[2]
request = urllib.request.Request(url + "/completion", data=json.dumps({"prompt": "Hello", "n_predict": 8}).encode(),
                                 headers={"Content-Type": "application/json", **({"Authorization": "Bearer " + key} if key else {})})
try:
    with urllib.request.urlopen(request, timeout=60) as reply:
        print(reply.status, reply.read().decode("utf-8", "replace"))
except urllib.error.HTTPError as error:
    print(error.code, error.read().decode("utf-8", "replace"))
except Exception as error:
    print(0, repr(error))
"""


def worker(name):
    return testinfra.get_host(f"ansible://{name}?ansible_inventory={INVENTORY}")


def server_url(host):
    env = host.file("/etc/llama-rpc/server.env").content_string
    settings = dict(line.split("=", 1) for line in env.splitlines() if "=" in line and not line.startswith("#"))
    return f"http://{settings['LLAMA_ARG_HOST']}:{settings['LLAMA_ARG_PORT']}"


def complete(host, key=KEY):
    result = host.run(f"python3 -c '{CLIENT}' {server_url(host)} '{key}'")
    status, _sep, body = result.stdout.strip().partition(" ")
    return int(status), body


def wait_until_serving(host, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = complete(host)
        if status == 200:
            return json.loads(body)
        time.sleep(1)
    raise AssertionError(f"llama-server does not serve completions after {timeout} s: {status} {body[:300]}")


def latest_result():
    files = sorted(glob.glob(str(RESULTS / "infer-*.json")))
    return (json.loads(Path(files[-1]).read_text()), len(files)) if files else (None, 0)


def infer(*extra_vars):
    """playbooks/infer.yml against this scenario's inventory; returns the CompletedProcess."""
    command = ["ansible-playbook", "-i", INVENTORY, str(ROOT / "playbooks" / "infer.yml")]
    for extra in extra_vars:
        command += ["-e", json.dumps(extra)]
    return subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)


def assert_refused(host, run, *fragments):
    """The run failed in the pre-flight with the fragments in its message, and llama-completion never ran."""
    output = run.stdout + run.stderr
    assert run.returncode != 0, output[-3000:]
    for fragment in fragments:
        assert fragment in output, f"{fragment!r} not in the output:\n{output[-3000:]}"
    assert "TASK [graviton.llama_rpc.rpc_master : Run llama-completion through the workers]" not in output


def test_one_shot_inference_result(host):
    result, _count = latest_result()
    assert result, f"no result file in {RESULTS}"
    assert result["text"].strip(), "empty text"
    figures = result["figures"]
    assert figures["eval_runs"] >= 1 and figures["eval_tps"] > 0 and figures["prompt_tps"] > 0 and figures["load_ms"] > 0
    workers = host.file("/etc/llama-rpc/workers").content_string.strip().split(",")
    assert len(workers) == 2
    for endpoint in workers:
        assert result["buffers"][endpoint]["model"] > 0, f"{endpoint} holds no model buffer: {result['buffers']}"
    assert result["build"]["rpc_protocol"] == "7.0.0" and result["plan"]["n_gpu_layers"] == 999
    print(f"one-shot: {figures}, attempts {result['attempts']}")


def test_example_pipeline_accepts_the_result():
    """The example CI workflow's own check step, run as it is against this scenario's real result."""
    workflow = yaml.safe_load((ROOT / "examples" / "github-actions" / "deploy-llama-cluster.yml").read_text())
    [check] = [step["run"] for job in workflow["jobs"].values() for step in job["steps"]
               if step.get("name") == "Check that the cluster generated text"]
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", check], cwd=RESULTS.parent, capture_output=True, text=True,
                         timeout=60, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "tokens/s over 2 workers" in run.stdout, run.stdout


def test_worker_list_is_what_the_server_reads(host):
    workers = host.file("/etc/llama-rpc/workers").content_string.strip()
    assert f"LLAMA_ARG_RPC={workers}\n" in host.file("/etc/llama-rpc/server.env").content_string
    names = RUNNER.get_hosts("llama_workers")
    addresses = [worker(name).interface.default().addresses[0] for name in names]
    assert workers == ",".join(f"{address}:50052" for address in addresses)


def test_server_requires_the_key(host):
    status, body = complete(host)
    assert status == 200 and json.loads(body)["content"] is not None
    assert complete(host, key="")[0] == 401
    assert complete(host, key="wrong-key")[0] == 401


def test_server_is_private_hardened_and_keeps_the_key_secret(host):
    service = host.service("llama-server.service")
    assert service.is_enabled and service.is_running
    address = host.interface.default().addresses[0]
    listeners = host.check_output("ss -Hltn 'sport = :8080'")
    assert f"{address}:8080" in listeners and "0.0.0.0:8080" not in listeners
    secret = host.file("/etc/llama-rpc/server-secret.env")
    assert secret.user == "root" and secret.mode == 0o600
    assert KEY not in host.check_output("journalctl -u llama-server --no-pager")
    assert KEY not in host.file("/etc/llama-rpc/server.env").content_string
    unit = host.check_output("systemctl show llama-server -p Environment -p DynamicUser -p Restart")
    assert "GGML_NO_BACKTRACE=1" in unit and "DynamicUser=yes" in unit and "Restart=always" in unit
    exposure = host.check_output("systemd-analyze security llama-server.service | tail -1")
    print(f"llama-server: {exposure.strip()}")
    assert float(exposure.split()[-3]) <= 2.0, exposure


def test_server_recovers_after_a_worker_dies(host):
    wait_until_serving(host)
    second = worker(RUNNER.get_hosts("llama_workers")[1])
    started = time.monotonic()
    second.check_output(f"systemctl kill -s KILL {WORKER_UNIT}")
    answer = wait_until_serving(host, timeout=180)
    recovered = time.monotonic() - started
    restarts = host.check_output("systemctl show llama-server -p NRestarts --value")
    print(f"recovery: kill -9 of a worker -> llama-server serves again in {recovered:.1f} s (server restarts: {restarts})")
    assert answer["content"] is not None


def test_preflight_refuses_a_stopped_worker(host):
    second = worker(RUNNER.get_hosts("llama_workers")[1])
    _before, count = latest_result()
    second.check_output(f"systemctl stop {WORKER_UNIT}")
    try:
        run = infer()
    finally:
        second.check_output(f"systemctl start {WORKER_UNIT}")
    assert_refused(host, run, "is refused", "nothing listens there", "Nothing was started")
    assert latest_result()[1] == count, "a result was written: inference ran"
    wait_until_serving(host)


def test_preflight_refuses_a_busy_worker(host):
    endpoint = host.file("/etc/llama-rpc/workers").content_string.strip().split(",")[0]
    address, port = endpoint.rsplit(":", 1)
    _before, count = latest_result()
    # Another client on the master holds the first worker (it gets it once the server lets go).
    host.check_output("systemd-run --unit other-client python3 -c "
                      f"\"import socket, time; s = socket.create_connection(('{address}', {port})); time.sleep(600)\"")
    try:
        run = infer({"rpc_master_probe_timeout": 2})
    finally:
        host.run("systemctl stop other-client")
    assert_refused(host, run, f"{endpoint} is timeout", "another client holds it")
    assert latest_result()[1] == count
    wait_until_serving(host)


def test_preflight_refuses_a_model_larger_than_the_cluster(host, tmp_path):
    sys.path.insert(0, str(ROOT))
    from tests.tools import tiny_model  # pylint: disable=import-outside-toplevel

    header = tmp_path / "huge.gguf"
    size = tiny_model.write_header_only(header)
    host_path = "/srv/huge.gguf"
    subprocess.run(["docker", "cp", str(header), f"{host.backend.get_hostname()}:{host_path}"], check=True)
    host.check_output(f"truncate -s {size} {host_path}")  # sparse: a 274 GB model that takes no disk
    _before, count = latest_result()
    run = infer({"rpc_master_model_src": host_path, "rpc_master_model_sha256": ""})
    host.run(f"rm -f {host_path}")
    assert_refused(host, run, "the model does not fit", "weights 255.02 GiB", "Add workers or larger instances")
    assert latest_result()[1] == count
    wait_until_serving(host)


@pytest.mark.parametrize("version", ["b11313"])
def test_preflight_refuses_mixed_builds(host, version):
    """A worker on another llama.cpp build (the same source built as another build number)."""
    name = RUNNER.get_hosts("llama_workers")[1]
    build = ["ansible-playbook", "-i", INVENTORY, "-l", name, str(ROOT / "tests" / "playbooks" / "llama_build.yml")]
    # Only the worker program: a worker needs no more, and it compiles in a third of the time.
    other_build = {"llama_build_version": version, "llama_build_targets": ["ggml-rpc-server"]}
    other = subprocess.run(build + ["-e", json.dumps(other_build)], capture_output=True, text=True, timeout=1800, check=False)
    assert other.returncode == 0, other.stdout[-3000:]
    try:
        _before, count = latest_result()
        run = infer()
    finally:
        back = subprocess.run(build, capture_output=True, text=True, timeout=1800, check=False)
    assert back.returncode == 0, back.stdout[-3000:]
    assert_refused(host, run, "Mixed llama.cpp builds", f"{name}: {version} 0c1e57098 {version[1:]}")
    assert latest_result()[1] == count
    wait_until_serving(host)


def test_bench_writes_report_chart_and_comparison(host, tmp_path):
    """playbooks/bench.yml on this cluster, twice: JSON, Markdown, a real PNG, and the ratios of the second run
    against the first. Small sizes: this proves the plumbing; make bench measures."""
    quick = {"bench_n_prompt": [16], "bench_n_gen": [8], "bench_repetitions": 1, "bench_tcp_megabytes": 64,
             "bench_results_dir": str(tmp_path)}
    command = ["ansible-playbook", "-i", INVENTORY, str(ROOT / "playbooks" / "bench.yml")]
    first = subprocess.run(command + ["-e", json.dumps(dict(quick, bench_name="first"))], capture_output=True, text=True,
                           timeout=1200, check=False)
    assert first.returncode == 0, first.stdout[-4000:]
    second = subprocess.run(command + ["-e", json.dumps(dict(quick, bench_name="second", bench_compare_with=str(tmp_path / "first.json")))],
                            capture_output=True, text=True, timeout=1200, check=False)
    assert second.returncode == 0, second.stdout[-4000:]
    result = json.loads((tmp_path / "second.json").read_text())
    counts = sorted({run["workers"] for run in result["runs"]})
    assert counts == [0, 1, 2], counts
    assert all(run["tokens_per_second"] > 0 for run in result["runs"])
    assert result["load"]["cold_bytes_sent"] > 0 and result["network"]["raw_tcp_mbit_per_s"] > 0
    assert (tmp_path / "second.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| Test | master alone | 1 worker | 2 workers |" in (tmp_path / "second.md").read_text()
    assert "tg8, 2 workers tokens/s" in second.stdout and " x" in second.stdout
    print("bench: " + json.dumps({run["test"] + "/" + str(run["workers"]): run["tokens_per_second"] for run in result["runs"]}))
    print(f"bench: load {result['load']}, network {result['network']}")
    wait_until_serving(host)
