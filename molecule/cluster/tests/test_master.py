"""The master: a three-part model fetched with a token and resumed, one-shot inference through both workers,
llama-server with its API key, recovery after a worker dies, a pre-flight that refuses bad clusters (another build, a
stopped worker, a busy worker, a model larger than the cluster) with its intended message and without running anything,
and a model fetched from S3 (moto) through a URL the controller signs."""

import glob
import hashlib
import json
import os
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import testinfra
import testinfra.utils.ansible_runner
import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
sys.path.insert(0, str(ROOT))
from tests.tools import collection, containers, model_shapes, tiny_model  # noqa: E402  pylint: disable=wrong-import-position

collection.importable()
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import tensor_cache  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import gguf, model_releases  # noqa: E402  pylint: disable=wrong-import-position
from tests.tools import fault_injection, llama_cpp  # noqa: E402  pylint: disable=wrong-import-position

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PLAYBOOK_INVENTORY = containers.scenario_inventory()  # playbooks go over SSH through the master, as on AWS
RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
# The scenario holds two clusters (molecule.yml): these tests are about cluster_a; test_gateway.py uses both.
CLUSTER, MASTER_GROUP, WORKER_GROUP = "cluster_a", "cluster_a_master", "cluster_a_workers"
testinfra_hosts = RUNNER.get_hosts(MASTER_GROUP)
[MASTER] = testinfra_hosts
RESULTS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "results"
RPC_PORT = RUNNER.get_variables(RUNNER.get_hosts(WORKER_GROUP)[0])["rpc_worker_port"]  # molecule.yml: not the default
MODEL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "tiny.gguf"  # one file: what the master alone runs
# what the scenario deploys: the same tensors as a set of three parts, on a host that wants a token (prepare.yml)
SET = sorted(Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]).glob("tiny-0000?-of-00003.gguf"))
MODEL_HOST = "http://127.0.0.1:8000"
KEY = "molecule-test-key"
WORKER_UNIT = "llama-rpc-worker@main.service"


def worker(name):
    return testinfra.get_host(f"ansible://{name}?ansible_inventory={INVENTORY}")


def server_url(host):
    return llama_cpp.server_url(host.file(llama_cpp.SERVER_ENV).content_string)


def request(host, url, key=KEY, body=None):
    """(status, body) of one request from the master (llama_cpp.REQUEST_ON_MASTER)."""
    return llama_cpp.answer(host.check_output(shlex.join(llama_cpp.request_on_master(url, key, body))))


def complete(host, key=KEY):
    return request(host, server_url(host) + "/completion", key, {"prompt": "Hello", "n_predict": 8})


def wait_until_serving(host, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = complete(host)
        if status == 200:
            return json.loads(body)
        time.sleep(1)
    raise AssertionError(f"llama-server does not serve completions after {timeout} s: {status} {body[:300]}")


def latest_result():
    files = sorted(glob.glob(str(RESULTS / f"infer-{MASTER}-[0-9]*.json")))
    return (json.loads(Path(files[-1]).read_text()), len(files)) if files else (None, 0)


def infer(*extra_vars, env=None):
    """playbooks/infer.yml against this scenario's inventory (verbose: every task's result is printed unless
    no_log hides it); returns the CompletedProcess."""
    command = ["ansible-playbook", "-v", "-i", PLAYBOOK_INVENTORY, "--limit", CLUSTER, str(ROOT / "playbooks" / "infer.yml")]
    for extra in extra_vars:
        command += ["-e", json.dumps(extra)]
    return subprocess.run(command, capture_output=True, text=True, timeout=900, check=False, env=env)


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
    # the test model is steered to printable ASCII (tests/tools/tiny_model.py): a replacement character is a fault
    assert all(char == "\n" or " " <= char <= "~" for char in result["text"]), repr(result["text"])
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
    names = RUNNER.get_hosts(WORKER_GROUP)
    addresses = [worker(name).interface.default().addresses[0] for name in names]
    assert workers == ",".join(f"{address}:{RPC_PORT}" for address in addresses)


def test_the_rpc_port_reaches_units_and_firewalls():
    """The scenario's one rpc_worker_port: what each worker's unit listens on and what its firewall opens."""
    for name in RUNNER.get_hosts(WORKER_GROUP):
        node = worker(name)
        address = node.interface.default().addresses[0]
        assert node.socket(f"tcp://{address}:{RPC_PORT}").is_listening
        pid = node.check_output("systemctl show -p MainPID --value llama-rpc-worker@main")
        arguments = node.check_output(f"tr '\\0' ' ' < /proc/{pid}/cmdline").split()
        assert arguments[arguments.index("-p") + 1] == str(RPC_PORT)
        rules = node.check_output("nft list table inet llama_rpc_worker")
        # the ports of the one rule that drops everyone else ("tcp dport 50099 counter ... drop")
        drops = [line.split("dport", 1)[1].split("counter")[0].strip(" {}") for line in rules.splitlines()
                 if line.strip().endswith("drop")]
        assert drops == [str(RPC_PORT)], rules


CACHE_DIR = "/var/cache/llama-rpc-worker/main/rpc"
CACHE_TOOL = "/opt/llama.cpp/current/bin/llama-rpc-cache"
GUARD_UNIT = "llama-rpc-worker-cache-guard@main.service"  # removes cache files whose bytes do not match their names
MASTER_STATE = "/etc/ansible/facts.d/llama_rpc_master.fact"  # rpc_master's published state (the saved plan)


def greedy(host, prompt="Once upon a time"):
    """Greedy generation: the same weights give the same tokens."""
    wait_until_serving(host)
    status, body = request(host, server_url(host) + "/completion", body={"prompt": prompt, "n_predict": 12, "temperature": 0})
    assert status == 200, body
    return json.loads(body)["content"]


def find_cache_files(printed):
    """The command that prints each tensor cache file on a worker (the files whose names are hex digits only), in
    find's -printf format: one place for what both helpers below list."""
    return f"find {CACHE_DIR} -maxdepth 1 -type f -regex '.*/[0-9a-f]*' -printf '{printed}\\n'"


def cached_files(name):
    """The tensor cache files on a worker, name -> size."""
    listing = worker(name).check_output(find_cache_files("%f %s"))
    return {line.split()[0]: int(line.split()[1]) for line in listing.splitlines() if len(line.split()[0]) == 16}


def cache_times(name):
    """The tensor cache files on a worker and their modification times, one `name time` line each, sorted: the
    format of the converge's records (converge.yml), so the two compare as text."""
    return worker(name).check_output(find_cache_files("%f %T@") + " | sort")


def planned_shares(host):
    """What the saved plan puts in each worker's cache: worker name -> set of cache file names."""
    plan = json.loads(host.file(MASTER_STATE).content_string)
    return {name: set(plan["cached_hashes"].get(f"{worker(name).interface.default().addresses[0]}:{RPC_PORT}", []))
            for name in RUNNER.get_hosts(WORKER_GROUP)}


def deploy(*extra_vars, env=None):
    """deploy.yml's master part (--tags rpc_master: the builds and the workers are as the scenario left them)."""
    command = ["ansible-playbook", "-i", PLAYBOOK_INVENTORY, "--limit", CLUSTER, str(ROOT / "playbooks" / "deploy.yml"), "--tags", "rpc_master"]
    for extra in extra_vars:
        command += ["-e", json.dumps(extra)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=1200, check=False, env=env)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    return run


def test_workers_caches_hold_exactly_their_share(host):
    """Each worker's cache holds the tensors the plan puts on it, named as llama.cpp names them, owned by the worker's
    user and closed to everyone else; together they are every tensor that travels by hash."""
    shares = planned_shares(host)
    header = gguf.read_model(SET[0])
    expected = {tensor["size"] for tensor in tensor_cache.hashed_tensors(header)}
    everything = []
    for name in RUNNER.get_hosts(WORKER_GROUP):
        files = cached_files(name)
        assert sorted(files) == sorted(shares[name]), (name, files, shares)
        assert set(files.values()) <= expected and len(files) > 0
        directory = worker(name).file(CACHE_DIR)
        assert (directory.user, directory.mode) == ("llama-rpc", 0o700)
        for cache_file in list(files)[:2]:  # the name is the hash of the bytes (llama.cpp's FNV-1a 64)
            assert worker(name).check_output(f"{CACHE_TOOL} hash {CACHE_DIR}/{cache_file}").split()[0] == cache_file
        everything += files
    assert len(everything) == len(set(everything)) == len(tensor_cache.hashed_tensors(header))
    # from every part of the set
    assert {Path(tensor["path"]).name for tensor in tensor_cache.hashed_tensors(header)} == {path.name for path in SET}


def model_host_report(host):
    """What the master's model host sent, per file, and which downloads it cut (tests/tools/model_server.py)."""
    status, body = request(host, f"{MODEL_HOST}/_sent", key="")
    assert status == 200, body
    return json.loads(body)


def test_the_set_came_with_its_token_resumed_after_a_cut_and_verified(host):
    """The model host wants a token and cut part 2's first request longer than 4 MB there (prepare.yml): each 45 MB
    part came over several connections, by byte ranges. The master holds every part with the publisher's bytes under
    llama.cpp's names, resumed the cut range from its bytes (the host sent at most 1.1x the set), and recorded each
    part as verified (a re-run reads none of them: see the next tests)."""
    report = model_host_report(host)
    sent = sum(count for name, count in report["sent"].items() if name.endswith(".gguf"))
    total = sum(path.stat().st_size for path in SET)
    print(f"model host: sent {sent} bytes for a set of {total} ({sent / total:.3f}x), cut {report['cut']}")
    assert report["cut"] == ["tiny-00002-of-00003.gguf"], report
    firsts = {int(asked.split("=")[1].split("-")[0]) for asked in report["ranges"]["tiny-00002-of-00003.gguf"] if asked}
    assert len(firsts) > 2 and any(first + 4_000_000 in firsts for first in firsts), report["ranges"]
    assert total <= sent <= 1.1 * total, (sent, total)
    # a release of its own, named after the model and its bytes, moved into place whole
    sums = [hashlib.sha256(path.read_bytes()).hexdigest() for path in SET]
    release = f"/var/lib/llama-models/{model_releases.release_name('tiny', sums)}"
    assert json.loads(host.file(MASTER_STATE).content_string)["model_path"] == f"{release}/{SET[0].name}"
    for path, digest in zip(SET, sums):
        fetched = host.file(f"{release}/{path.name}")
        assert fetched.sha256sum == digest and fetched.mode == 0o644
    assert not host.run("find /var/lib/llama-models -name '*.partial'").stdout
    assert host.run("ls -A /var/lib/llama-models/.incoming").stdout == ""
    record = json.loads(host.file("/var/lib/llama-rpc-master/fetch/verified.json").content_string)
    assert {f"{release}/{path.name}" for path in SET} <= set(record), record


def test_server_announces_the_model_by_its_name(host):
    """/v1/models names the set by its base name (rpc_master_server_model_alias), not a file path."""
    status, body = request(host, server_url(host) + "/v1/models")
    assert status == 200, body
    assert [model["id"] for model in json.loads(body)["data"]] == ["tiny"], body


def test_the_set_over_the_workers_gives_the_tokens_of_one_file_on_the_master_alone(host):
    """Greedy: llama-server over the two workers, loading the three-part set, writes what llama-completion writes on the
    master alone from the one-file model. And the plan's weights per worker are llama.cpp's own model buffers there
    (the one-shot inference's log, which loaded the set with the plan: within 1%)."""
    prompt = "Once upon a time"
    through_workers = greedy(host, prompt)
    bin_dir = json.loads(host.file("/etc/ansible/facts.d/llama_rpc_build.fact").content_string)["bin_dir"]

    def once():
        run = host.run(llama_cpp.greedy_command(bin_dir, "/srv/model-source/tiny.gguf", prompt, 12))
        return run.rc, run.stderr, run.stdout
    written = llama_cpp.until_complete(once)
    alone = written[len(prompt):] if written.startswith(prompt) else written
    assert alone.rstrip("\n") == through_workers, (alone, through_workers)

    plan = json.loads(host.file(MASTER_STATE).content_string)["plan"]
    result, _count = latest_result()
    assert result["plan"]["workers"] == plan["workers"] and result["model"]["path"].endswith("tiny-00001-of-00003.gguf")
    logged = {endpoint: buffers.get("model", 0) for endpoint, buffers in result["buffers"].items()}
    for node in plan["workers"]:
        print(f"{node['name']}: plan {node['weights_bytes']} bytes, llama.cpp {logged.get(node['name'])}")
        assert abs(node["weights_bytes"] - logged[node["name"]]) <= 0.01 * logged[node["name"]] + 0.01 * (1 << 20), node


def test_a_load_from_staged_caches_sends_hashes_not_weights(host):
    """llama-server restarted (a reload, as after a crash or an upgrade): the master sends at most 5% of the model."""
    counter = f"/sys/class/net/{host.interface.default().name}/statistics/tx_bytes"
    wait_until_serving(host)
    before = int(host.file(counter).content_string)
    host.check_output("systemctl restart llama-server")
    wait_until_serving(host)
    sent = int(host.file(counter).content_string) - before
    size = MODEL.stat().st_size
    print(f"staged load: the master sent {sent} bytes for a {size}-byte model ({100 * sent / size:.1f}%)")
    assert sent <= 0.05 * size


def test_a_deploy_keeps_the_caches_removes_strays_and_repairs_damage(host):
    """One deploy after three changes to the workers' caches. A file planted under a hash no served model has: the
    deploy removes it. One worker's file truncated while its cache guard is stopped: the deploy finds it (bytes against
    names). Another's altered under its guard: the guard removes it within seconds. The deploy stages both again, and
    greedy generation gives the same tokens as before. Every other cache file is still there with the times it had
    after the converge and after Molecule's second (idempotence) converge, and the deploy read no model byte.
    (One deploy for what were two tests' deploys: the cluster scenario is the run's longest path.)"""
    before = greedy(host)
    first, second = RUNNER.get_hosts(WORKER_GROUP)
    truncated = sorted(cached_files(first))[0]
    altered = sorted(cached_files(second))[0]
    sent_before = model_host_report(host)["sent"]
    # a well-formed cache file (its name is its bytes' hash: the cache guard leaves it alone) of no served model
    worker(first).check_output("head -c 1048576 /dev/urandom > /root/stray")
    stray = worker(first).check_output(f"{CACHE_TOOL} hash /root/stray").split()[0]
    worker(first).check_output(f"install -o llama-rpc -m 0600 /root/stray {CACHE_DIR}/{stray}")
    assert stray in cached_files(first)
    since = worker(second).check_output("date +%s")
    worker(first).check_output(f"systemctl stop {GUARD_UNIT}")
    try:
        worker(first).check_output(f"truncate -s 1000 {CACHE_DIR}/{truncated}")
        worker(second).check_output(f"printf planted | dd of={CACHE_DIR}/{altered} bs=1 seek=4096 conv=notrunc status=none")
        deadline = time.monotonic() + 30
        while altered in cached_files(second) and time.monotonic() < deadline:
            time.sleep(1)
        removed_by_guard = altered not in cached_files(second)
        journal = worker(second).check_output(f"journalctl -u {GUARD_UNIT} --since @{since} --no-pager -o cat")
        run = deploy()
    finally:
        worker(first).check_output(f"systemctl start {GUARD_UNIT}")
    assert removed_by_guard and f"Removed the tensor cache file {altered}" in journal, journal[-2000:]
    # The re-run read no model byte to check the model: model_fetch found every part in its record, unchanged since
    # (a stat each), so nothing was fetched, signed or hashed, and the model host sent nothing.
    present = containers.task_output(run.stdout, "graviton.llama_rpc.rpc_master : Look for the model's release, and ask "
                                                 "its sources")
    fetch = containers.task_output(run.stdout, "graviton.llama_rpc.rpc_master : Fetch and verify the model's parts "
                                               "(progress every 30 s)")
    assert "ok: [" in present and "skipping: [" in fetch and "ok: [" not in fetch, (present, fetch)
    gguf_sent = {name: count for name, count in model_host_report(host)["sent"].items() if name.endswith(".gguf")}
    assert gguf_sent == {name: count for name, count in sent_before.items() if name.endswith(".gguf")}
    assert not host.run("ls /var/lib/llama-rpc-master/fetch/*.sha256.json").stdout
    # Only the first worker's check removed files (the truncated one and the stray); the guard had the altered one.
    printed = containers.task_output(run.stdout, "graviton.llama_rpc.rpc_worker : Check each instance's tensor cache (bytes against "
                                                 "names, files of other models) and find what it lacks")
    assert printed.count("changed: [") == 1 and f"changed: [{first}]" in printed, printed
    for name, cache_file in ((first, truncated), (second, altered)):
        assert worker(name).check_output(f"{CACHE_TOOL} hash {CACHE_DIR}/{cache_file}").split()[0] == cache_file
        node = worker(name)
        records = sorted(node.check_output("ls /root/cache-records").split())
        assert len(records) >= 2, records  # converge, idempotence
        now = cache_times(name)
        after = [node.file(f"/root/cache-records/{record}").content_string.strip() for record in records[:2]]
        untouched = [line for line in now.strip().splitlines() if line.split()[0] != cache_file]
        assert after[0] == after[1] and now.strip(), (name, after)
        assert untouched == [line for line in after[0].splitlines() if line.split()[0] != cache_file], (name, after, now)
        assert cache_file in after[0] and cache_file in now, (name, cache_file, after, now)
    assert stray not in cached_files(first)
    assert greedy(host) == before


def test_a_full_cache_disk_leaves_the_worker_up_and_no_short_file_for_a_load(host):
    """The second worker's cache on a file system too small for its share (a tmpfs over it), and llama-server
    restarted: the load sends that share and the disk fills up. The worker stays up, its cache guard removes the file
    the full disk left short and says in the journal what to free, and the next load gives the same tokens as before
    (filled from the short file, its tensor would be wrong)."""
    before = greedy(host)
    name = RUNNER.get_hosts(WORKER_GROUP)[1]
    node = worker(name)
    sizes = sorted(cached_files(name).values())
    room_kib = (sum(sizes) - sizes[0] // 2) // 1024  # the share less half a file: the last file written is left short
    since = node.check_output("date +%s")
    node.check_output(f"mount -t tmpfs -o size={room_kib}k,mode=0700,uid=$(id -u llama-rpc),gid=$(id -g llama-rpc) "
                      f"llama-rpc-full-disk {CACHE_DIR}")
    try:
        node.check_output(f"systemctl restart {WORKER_UNIT}")  # its sandbox (and its guard's) sees the small disk
        pid = worker_process(node)[0]
        host.check_output("systemctl restart llama-server")
        through_full_disk = greedy(host)
        deadline, journal = time.monotonic() + 60, ""
        while "Removed the tensor cache file" not in journal and time.monotonic() < deadline:
            time.sleep(1)
            journal = node.check_output(f"journalctl -u {GUARD_UNIT} --since @{since} --no-pager -o cat")
        left = node.check_output(f"find {CACHE_DIR} -maxdepth 1 -type f -printf '%f\\n'").split()
        hashes = {cache_file: node.check_output(f"{CACHE_TOOL} hash {CACHE_DIR}/{cache_file}").split()[0] for cache_file in left}
        host.check_output("systemctl restart llama-server")
        after_guard = greedy(host)
        still_up = worker_process(node)[0] == pid and node.service(WORKER_UNIT).is_running
        full = node.check_output(f"df --output=avail -B1 {CACHE_DIR} | tail -1")
    finally:
        node.check_output(f"umount {CACHE_DIR} && systemctl restart {WORKER_UNIT}")
    print(f"full cache disk ({room_kib} KiB for a {sum(sizes)}-byte share): {len(left)} whole files left, "
          f"{full.strip()} bytes free; the guard said: {journal.strip().splitlines()[-1][:300] if journal.strip() else ''}")
    # it names the file system that filled up (here the tmpfs, mounted on the cache itself)
    assert "Removed the tensor cache file" in journal and f"Free space on {CACHE_DIR} " in journal, journal[-2000:]
    assert all(digest == cache_file for cache_file, digest in hashes.items()), hashes
    assert len(left) < len(sizes), left
    assert still_up, "the full disk took the worker down"
    assert through_full_disk == before and after_guard == before, (before, through_full_disk, after_guard)
    wait_until_serving(host)


def test_every_type_is_staged_and_a_removed_model_leaves_nothing_in_the_caches(host, tmp_path):
    """A second model, whose feed-forward tensors are MXFP4, IQ4_XS, IQ2_XXS, Q2_K, TQ2_0, BF16 and Q8_0 (random blocks,
    every one over 10 MiB) and whose output is tied to its 12 MB embeddings, deployed from a path: the plan and the
    hashes cover every tensor llama.cpp sends by hash (the embeddings' copy on the output layer's worker too), and a
    load from the staged caches stores nothing in them (names and times unchanged); the first model's files stay in the
    caches, kept for a rollback (rpc_master_models_kept: 1). Then the first model again, keeping none: the second one's
    cache files are gone from every worker."""
    other = model_shapes.typed(tmp_path / "typed.gguf")
    subprocess.run(["docker", "cp", str(other), f"{host.backend.get_hostname()}:/srv/typed.gguf"], check=True)
    workers = RUNNER.get_hosts(WORKER_GROUP)
    first_model = {name: set(cached_files(name)) for name in workers}
    hashed = tensor_cache.hashed_tensors(gguf.read_model(other))
    assert {gguf.type_name(tensor["type"]) for tensor in gguf.read_model(other)["tensors"]
            if tensor["bytes"] > tensor_cache.HASH_THRESHOLD} >= set(model_shapes.TYPED)
    assert "token_embd.weight" in [tensor["name"] for tensor in hashed]  # the tied output's copy travels by hash

    try:
        deploy({"rpc_master_model_src": "/srv/typed.gguf", "rpc_master_model_sha256": "", "rpc_master_model_sha256sums": ""})
        shares = planned_shares(host)
        second_model = {name: set(cached_files(name)) - first_model[name] for name in workers}
        # A small model may sit on one worker alone: the other's share, and so its cache, is then empty.
        assert second_model == shares and any(second_model.values()), (second_model, shares)
        assert len(set().union(*second_model.values())) == len(hashed), (second_model, len(hashed))
        # the first model's files are all still there, beside the second's
        assert all(first_model[name] <= set(cached_files(name)) for name in workers), first_model
        before_load = {name: cache_times(name) for name in workers}
        host.check_output("systemctl restart llama-server")
        wait_until_serving(host)
        assert {name: cache_times(name) for name in workers} == before_load
    finally:
        deploy({"rpc_master_models_kept": 0})
        host.run("rm -f /srv/typed.gguf /srv/.typed.gguf.tensors.json")
    for name in workers:
        assert set(cached_files(name)) == first_model[name], name
    wait_until_serving(host)


def test_server_requires_the_key(host):
    status, body = complete(host)
    assert status == 200 and json.loads(body)["content"] is not None
    assert complete(host, key="")[0] == 401
    assert complete(host, key="wrong-key")[0] == 401


def get(host, path, key=KEY):
    """GET llama-server's path from the master: the status and the body."""
    return request(host, server_url(host) + path, key)


def test_server_runs_the_plans_slots_each_with_the_whole_context(host):
    """rpc_master_server_parallel is 4 (the default) and the context 512 tokens (molecule.yml): the plan kept the 4 slots
    (their KV cache fits), and llama-server, which splits its -c between its slots, runs with -np 4 -c 2048, so each slot
    has the whole 512 tokens."""
    plan = json.loads(host.file(MASTER_STATE).content_string)["plan"]
    assert (plan["slots"], plan["slots_asked"], plan["context"], plan["server_context"]) == (4, 4, 512, 2048), plan
    status, body = get(host, "/props")
    assert status == 200, body
    props = json.loads(body)
    assert props["total_slots"] == 4 and props["default_generation_settings"]["n_ctx"] == 512, props


def scrape(host, key=KEY):
    """llama-server's /metrics as Prometheus reads it: status, and each sample's value by name (Prometheus's own Python
    parser, so the README's scrape configuration gets what this test sees)."""
    status, body = get(host, "/metrics", key)
    if status != 200:  # the body is llama-server's JSON error, not metrics
        return status, {}
    return status, {sample.name: sample.value for family in text_string_to_metric_families(body) for sample in family.samples}


def test_prometheus_scrapes_the_server_with_the_key(host):
    """/metrics is in Prometheus's text format, behind the API key like every other endpoint, and its counters move with
    each completion (README, Monitoring)."""
    assert scrape(host, key="")[0] == 401
    status, before = scrape(host)
    assert status == 200
    wanted = {"llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total", "llamacpp:n_decode_total",
              "llamacpp:requests_processing"}
    assert wanted <= before.keys(), sorted(before)
    assert complete(host)[0] == 200
    after = scrape(host)[1]
    assert after["llamacpp:tokens_predicted_total"] > before["llamacpp:tokens_predicted_total"], (before, after)
    assert after["llamacpp:n_decode_total"] > before["llamacpp:n_decode_total"], (before, after)


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
    exposure = containers.security_exposure(host.check_output("systemd-analyze security llama-server.service --no-pager"))
    print(f"llama-server: systemd-analyze security exposure {exposure}")
    assert exposure <= 2.0


def test_server_recovers_after_a_worker_dies(host):
    wait_until_serving(host)
    second = worker(RUNNER.get_hosts(WORKER_GROUP)[1])
    started = time.monotonic()
    second.check_output(f"systemctl kill -s KILL {WORKER_UNIT}")
    answer = wait_until_serving(host, timeout=180)
    recovered = time.monotonic() - started
    restarts = host.check_output("systemctl show llama-server -p NRestarts --value")
    print(f"recovery: kill -9 of a worker -> llama-server serves again in {recovered:.1f} s (server restarts: {restarts})")
    assert answer["content"] is not None


def stream_completions(url, stop, until, results):
    """One client: streamed completions one after another until told to stop or `until` (monotonic); each request's
    start, its wait (to its last byte, its error or its closed stream) and how it ended go to results."""
    while not stop.is_set() and time.monotonic() < until:
        started = time.monotonic()
        ended = fault_injection.complete(url, KEY)
        results.append((started, time.monotonic() - started, ended))
        if ended != "ok":
            time.sleep(0.5)


# Each fault holds for FAULT_SECONDS under three streaming clients. The bound on a request's wait once the fault has
# begun is the watchdog's (molecule.yml: interval 2 s, timeout 5 s) plus llama-server's TimeoutStopSec (5 s), and 5 s
# of slack.
FAULTS = {"worker frozen": fault_injection.freeze, "path dropping every packet": fault_injection.drop_every_packet}
FAULT_SECONDS, WAIT_BOUND, BACK_WITHIN = 12, 2 + 5 + 5 + 5, 60


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_stalled_worker_never_hangs_a_client_and_the_cluster_comes_back(host, fault):
    """llama.cpp's RPC client would wait on a stalled worker without end, and every client with it. The watchdog
    restarts llama-server, which ends every request in flight; the server serves again once the fault ends."""
    wait_until_serving(host)
    second = worker(RUNNER.get_hosts(WORKER_GROUP)[1])
    url, results, stop = server_url(host), [], threading.Event()
    master_address = host.interface.default().addresses[0]  # read before: every wait is counted from the fault
    planned_fault = time.monotonic() + 3  # the clients are streaming by then
    until = planned_fault + FAULT_SECONDS + BACK_WITHIN
    clients = [threading.Thread(target=stream_completions, args=(url, stop, until, results)) for _client in range(3)]
    for client in clients:
        client.start()
    time.sleep(max(0.0, planned_fault - time.monotonic()))
    fault_at = time.monotonic()
    end_fault = FAULTS[fault](second.check_output, master_address)
    try:
        time.sleep(FAULT_SECONDS)
    finally:
        end_fault()
    ended_at = time.monotonic()
    served_again = None
    while served_again is None and time.monotonic() < until:
        time.sleep(0.5)
        served_again = min((start + wait for start, wait, ended in list(results) if ended == "ok" and start >= ended_at),
                           default=None)
    stop.set()
    for client in clients:
        client.join()
    # each request that met the fault: how long it waited from the fault's start (or its own, if later) to its end
    during = [(start, start + wait - max(start, fault_at), ended) for start, wait, ended in results
              if start + wait >= fault_at and start < ended_at]
    longest = max(wait for _start, wait, _ended in during)
    back = served_again - ended_at if served_again else float("nan")
    print(f"{fault} ({FAULT_SECONDS} s, 3 streaming clients): {len(during)} requests met the fault, longest wait in it "
          f"{longest:.1f} s (bound {WAIT_BOUND} s), endings {sorted({ended for _s, _w, ended in during})}; serves again "
          f"{back:.1f} s after the fault ended")
    assert longest <= WAIT_BOUND, sorted(during, key=lambda request: -request[1])[:5]
    watchdog = host.check_output("journalctl -u llama-server-watchdog --no-pager -o cat")
    assert "has had requests and no decode step" in watchdog, watchdog[-2000:]
    assert served_again is not None and back <= BACK_WITHIN, results[-10:]
    wait_until_serving(host)


def test_preflight_refuses_a_stopped_worker(host):
    second = worker(RUNNER.get_hosts(WORKER_GROUP)[1])
    _before, count = latest_result()
    second.check_output(f"systemctl stop {WORKER_UNIT}")
    try:
        run = infer()
    finally:
        second.check_output(f"systemctl start {WORKER_UNIT}")
    # refused before llama-server is touched: the message ends with what the master still serves
    assert_refused(host, run, "is refused", "nothing listens there", "Nothing the master serves changed: llama-server "
                   "still serves")
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
    header = tmp_path / "huge.gguf"
    size = tiny_model.write_header_only(header)
    host_path = "/srv/huge.gguf"
    subprocess.run(["docker", "cp", str(header), f"{host.backend.get_hostname()}:{host_path}"], check=True)
    host.check_output(f"truncate -s {size} {host_path}")  # sparse: a 274 GB model that takes no disk
    _before, count = latest_result()
    run = infer({"rpc_master_model_src": host_path, "rpc_master_model_sha256": "", "rpc_master_model_sha256sums": ""})
    host.run(f"rm -f {host_path}")
    assert_refused(host, run, "the model does not fit", "weights 255.02 GiB", "Add workers or larger instances")
    assert latest_result()[1] == count
    wait_until_serving(host)


def test_preflight_advises_the_master_alone_and_refuses_when_strict(host):
    """The scenario's model fits the master alone (and one worker): the plan says so, and with
    rpc_master_refuse_needless_split the pre-flight refuses the cluster before anything runs; llama-server, which the
    one-shot inference pauses for its pre-flight, serves again."""
    advice = json.loads(host.file(MASTER_STATE).content_string)["plan"]["advice"]
    assert advice["master_alone"] and advice["fewest_workers"] == 1 and advice["workers"] == 2, advice
    # a few MB, and llama-server's 8 GiB prompt cache: a c8g.2xlarge (16 GiB, 12 at 75%) holds it
    assert advice["single_instance"] == "c8g.2xlarge", advice
    _before, count = latest_result()
    run = infer({"rpc_master_refuse_needless_split": True})
    assert_refused(host, run, "fits the master alone", "RPC pools memory, it does not add compute",
                   "On AWS one c8g.2xlarge (16 GiB) holds it", "rpc_master_refuse_needless_split is on")
    assert latest_result()[1] == count
    wait_until_serving(host)


def worker_process(node):
    """The worker's process id and the build its settings name (what it was started with: its program is reached
    through `current`, and /proc/PID/exe is not readable without CAP_SYS_PTRACE in these containers)."""
    pid = node.check_output(f"systemctl show -p MainPID --value {WORKER_UNIT}")
    build = node.check_output("sed -n 's/^RPC_WORKER_BUILD=//p' /etc/llama-rpc-worker/main.env")
    return pid, build


def current_build(node):
    return node.check_output("readlink -f /opt/llama.cpp/current").rsplit("/", 1)[1]


def test_preflight_refuses_mixed_builds_and_a_worker_switches_build_and_back(host, tmp_path):
    """A worker built from another archive of the same release (one file added): same labels, other content. The
    rpc_worker role restarts the worker on the build that is current (it ran the old one before), and setting the old
    pin back (deploy.yml on the whole cluster) switches back to the kept build without compiling or receiving it, with
    llama-server stopped before the worker restarts and started once after it."""
    name = RUNNER.get_hosts(WORKER_GROUP)[1]
    node = worker(name)
    archive, sha256 = os.environ["LLAMA_RPC_TEST_ARCHIVE"], os.environ["LLAMA_RPC_TEST_ARCHIVE_SHA256"]
    other_archive, other_sha256 = llama_cpp.patched_archive(tmp_path)
    # The build and the worker roles on that worker, as deploy.yml runs them (the master's facts are its firewall's).
    play = tmp_path / "worker.yml"
    play.write_text(yaml.safe_dump([{"name": "Master facts", "hosts": MASTER_GROUP, "gather_facts": True},
                                    {"name": "Worker", "hosts": name,
                                     "roles": ["graviton.llama_rpc.llama_build", "graviton.llama_rpc.rpc_worker"]}]))
    # The worker's part that names its build (its settings, and the restart they notify), after its checks.
    build = ["ansible-playbook", "-i", PLAYBOOK_INVENTORY, "--tags", "llama_build,rpc_worker_install", str(play)]
    # Only the worker program: a worker needs no more, and it compiles in a third of the time. Kept in the machine's
    # cache of built binaries, not the scenario's: the patched archive is the same every run, so it compiles once.
    other_build = {"llama_build_archive_src": str(other_archive), "llama_build_archive_sha256": other_sha256,
                   "llama_build_targets": ["ggml-rpc-server"],
                   "llama_build_controller_cache": f"{os.environ['LLAMA_RPC_BUILD_CACHE']}/artifacts"}
    before = worker_process(node)
    first_build = current_build(node)
    other = subprocess.run(build + ["-e", json.dumps(other_build)], capture_output=True, text=True, timeout=1800, check=False)
    try:
        _before, count = latest_result()
        run = infer()
        other_build_id = current_build(node)
        after_switch = worker_process(node)
    finally:
        since = host.check_output("date +%s")
        restarts = host.check_output("systemctl show -p NRestarts --value llama-server")
        back = subprocess.run(["ansible-playbook", "-i", PLAYBOOK_INVENTORY, "--limit", CLUSTER, str(ROOT / "playbooks" / "deploy.yml")],
                              capture_output=True, text=True, timeout=1800, check=False)
    assert other.returncode == 0, other.stdout[-3000:]
    assert back.returncode == 0, back.stdout[-3000:]
    # Both sources are named; the labels (release b11312, the same commit) are the same and do not hide it.
    assert_refused(host, run, "Mixed llama.cpp builds", f"{MASTER}: archive {archive} (sha256 {sha256[:12]})",
                   f"{name}: archive {other_archive} (sha256 {other_sha256[:12]})")
    assert latest_result()[1] == count
    # The rpc_worker role restarted the worker on the new build (llama_build only installs it), and on the kept one.
    back_again = worker_process(node)
    assert before[1] == first_build and other_build_id != first_build, (before, first_build, other_build_id)
    assert after_switch[0] != before[0] and after_switch[1] == other_build_id, (before, after_switch, other_build_id)
    assert back_again[0] != after_switch[0] and back_again[1] == first_build == current_build(node), (after_switch, back_again)
    for step in ("_compile.yml", "_distribute.yml"):
        assert f"/{step}" not in back.stdout, f"setting the old pin back ran {step}:\n{back.stdout[-3000:]}"
    # Not left to fail on the restarted worker and be started again by systemd (once per worker, on a mix of builds).
    stopped = containers.task_output(back.stdout, "graviton.llama_rpc.rpc_master : Stop llama-server while the nodes "
                                                  "switch build (it starts once, on the new build, after the workers)")
    journal = host.check_output(f"journalctl -u llama-server --since @{since} --no-pager -o cat")
    starts = [line for line in journal.splitlines() if line.startswith("Started ")]
    assert f"changed: [{MASTER}]" in stopped, stopped
    assert len(starts) == 1, journal[-3000:]
    assert host.check_output("systemctl show -p NRestarts --value llama-server") == restarts, journal[-3000:]
    print(f"mixed builds: worker {name} restarted on {other_build_id} and back on {first_build}, without a compile")
    wait_until_serving(host)


@pytest.fixture(name="s3_model")
def fixture_s3_model(host):
    """moto's S3 on this machine's address on the cluster's network (the master downloads from it), holding the
    scenario's model as s3://llama-models/tiny/tiny.gguf, and its three-part set with its checksum file under
    s3://llama-models/set/; yields the controller's environment for it."""
    import boto3  # pylint: disable=import-outside-toplevel
    from moto.server import ThreadedMotoServer  # pylint: disable=import-outside-toplevel

    gateway = subprocess.run(["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.Gateway}}{{end}}",
                              host.backend.get_hostname()], capture_output=True, text=True, check=True).stdout.strip()
    with socket.socket() as probe:
        probe.bind((gateway, 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address=gateway, port=port, verbose=False)
    server.start()
    credentials = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    env = dict(os.environ, AWS_URL=f"http://{gateway}:{port}", **credentials)
    s3 = boto3.client("s3", endpoint_url=env["AWS_URL"], region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    s3.create_bucket(Bucket="llama-models")
    s3.upload_file(str(MODEL), "llama-models", "tiny/tiny.gguf")
    for path in SET + [MODEL.with_name("SHA256SUMS")]:
        s3.upload_file(str(path), "llama-models", f"set/{path.name}")
    try:
        yield env
    finally:
        server.stop()
        host.run("rm -rf /var/lib/llama-models/from-s3-* /var/lib/llama-models/.incoming/from-s3-*")


def test_a_set_from_a_path_on_the_master(host):
    """The three-part set through a path on the master (its parts beside the first, checked against the checksum file
    there): the one-shot inference loads it, with the tokens the scenario's set gives through its URL."""
    run = infer({"rpc_master_model_src": "/srv/model-source/tiny-00001-of-00003.gguf",
                 "rpc_master_model_sha256sums": "/srv/model-source/SHA256SUMS", "rpc_master_infer_temperature": 0})
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    result, _count = latest_result()
    assert result["model"]["path"] == "/srv/model-source/tiny-00001-of-00003.gguf" and len(result["model"]["parts"]) == 3
    assert result["text"].strip() and result["figures"]["eval_tps"] > 0
    wait_until_serving(host)


def test_model_from_s3_through_a_signed_url(host, s3_model):
    """The three-part set from S3: the controller signs a URL per part and for the checksum file, the master downloads
    with no AWS credentials of its own (and the scenario's token is not sent with them: S3 refuses a second
    credential); the signed URLs never reach the (verbose) log; inference runs on the fetched set, renamed with its
    pattern; a re-run signs and downloads nothing."""
    release = "/var/lib/llama-models/" + model_releases.release_name(
        "from-s3", [hashlib.sha256(path.read_bytes()).hexdigest() for path in SET])
    fetched = f"{release}/from-s3-00001-of-00003.gguf"
    source = {"rpc_master_model_src": "s3://llama-models/set/tiny-00001-of-00003.gguf", "rpc_master_model_name": "from-s3",
              "rpc_master_model_sha256sums": "s3://llama-models/set/SHA256SUMS"}
    first = infer(source, env=s3_model)
    output = first.stdout + first.stderr
    assert first.returncode == 0, output[-3000:]
    assert "X-Amz-Signature" not in output and "X-Amz-Credential" not in output
    result, _count = latest_result()
    assert result["model"]["path"] == fetched and result["figures"]["eval_tps"] > 0 and len(result["model"]["parts"]) == 3
    for number, path in enumerate(SET, start=1):
        part = host.file(f"{release}/from-s3-0000{number}-of-00003.gguf")
        assert part.sha256sum == hashlib.sha256(path.read_bytes()).hexdigest() and part.mode == 0o644
    model = host.file(fetched)
    # The master downloaded through the signed URL alone: it has no boto3 (amazon.aws modules could not run there).
    assert host.run("python3 -c 'import boto3'").rc != 0

    mtime = model.mtime
    again = infer(source, env=s3_model)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert host.file(fetched).mtime == mtime
    for task in ["Sign a download URL of each S3 object (on the controller)",
                 "Fetch and verify the model's parts (progress every 30 s)"]:
        printed = containers.task_output(again.stdout, f"graviton.llama_rpc.rpc_master : {task}")
        assert "skipping: [" in printed and "ok: [" not in printed and "changed: [" not in printed, f"{task}:{printed}"
    wait_until_serving(host)


def test_model_from_s3_refusals(host, s3_model):
    """An object that is not there: refused when signing, before the master is touched. An object whose sha256 is
    not the one given: nothing lands on the master. Neither runs inference."""
    _before, count = latest_result()
    absent = infer({"rpc_master_model_src": "s3://llama-models/tiny/absent.gguf", "rpc_master_model_sha256": "0" * 64,
                    "rpc_master_model_sha256sums": ""}, env=s3_model)
    assert_refused(host, absent, "cannot sign a download of s3://llama-models/tiny/absent.gguf",
                   "Key tiny/absent.gguf does not exist", "s3:GetObject")
    assert not host.file("/var/lib/llama-models/absent.gguf").exists

    other = infer({"rpc_master_model_src": "s3://llama-models/tiny/tiny.gguf", "rpc_master_model_name": "from-s3-bad.gguf",
                   "rpc_master_model_sha256": "0" * 64, "rpc_master_model_sha256sums": ""}, env=s3_model)
    output = other.stdout + other.stderr
    assert_refused(host, other, "The model (s3://llama-models/tiny/tiny.gguf) was not fetched to", "after its download, not " + "0" * 64,
                   "(its checksum in rpc_master_model_sha256). It was removed")
    assert "X-Amz-Signature" not in output
    assert not host.run("find /var/lib/llama-models -name 'from-s3-bad*'").stdout
    assert "Nothing the master serves changed: llama-server still serves" in output
    assert latest_result()[1] == count
    wait_until_serving(host)


def test_bench_runs_over_both_workers_and_measures_from_one_without_a_mirror(host, tmp_path):
    """playbooks/bench.yml on this cluster at small sizes, tokens and network only: tokens/s on the master alone, over
    one worker and over both, and iperf3 on the first worker, which has no package mirror, from the packages the master
    fetched for it; then the pre-flight's advice quotes what it measured. The loads beside the load-time model, clients
    at once and a second run compared with the first are the bench role's own checks on the smallest cluster
    (tests/integration/test_bench_alone.py)."""
    quick = {"bench_n_prompt": [16], "bench_n_gen": [8], "bench_repetitions": 1, "bench_tcp_megabytes": 64,
             "bench_results_dir": str(tmp_path), "bench_name": "cluster", "bench_load": False, "bench_concurrency": []}
    command = ["ansible-playbook", "-i", PLAYBOOK_INVENTORY, "--limit", CLUSTER, str(ROOT / "playbooks" / "bench.yml")]
    run = subprocess.run(command + ["-e", json.dumps(quick)], capture_output=True, text=True, timeout=1200, check=False)
    assert run.returncode == 0, run.stdout[-4000:]
    result = json.loads((tmp_path / "cluster.json").read_text())
    counts = sorted({bench_run["workers"] for bench_run in result["runs"]})
    assert counts == [0, 1, 2], counts
    assert all(bench_run["tokens_per_second"] > 0 for bench_run in result["runs"])
    assert "| Test | master alone | 1 worker | 2 workers |" in (tmp_path / "cluster.md").read_text()
    assert result["network"]["raw_tcp_mbit_per_s"] > 0 and result["network"]["tool"].startswith("iperf 3"), result["network"]
    first_worker = worker(RUNNER.get_hosts(WORKER_GROUP)[0])
    assert result["network"]["path"].endswith(" -> " + RUNNER.get_hosts(WORKER_GROUP)[0])
    assert first_worker.package("iperf3").is_installed and first_worker.package("libiperf0").is_installed
    # The pre-flight's advice now quotes what the bench measured (local fact llama_rpc_bench): the master alone against
    # the two workers.
    refused = infer({"rpc_master_refuse_needless_split": True})
    assert_refused(host, refused, "bench.yml measured it (", "tokens/s on the master alone", "through 2 worker(s)")
    print("bench: " + json.dumps({bench_run["test"] + "/" + str(bench_run["workers"]): bench_run["tokens_per_second"]
                                  for bench_run in result["runs"]}) + f", network {result['network']}")
    wait_until_serving(host)
