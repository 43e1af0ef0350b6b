"""The rpc_master role on the smallest cluster, for a change to it (`make role ROLE=rpc_master`, minutes warm): a
master and one worker, fresh systemd hosts, deployed by playbooks/deploy.yml (conftest.py, small_cluster). llama-server
over the worker writes the greedy tokens of llama.cpp on the master alone, wants its key and names the model, and the
worker's cache holds the plan's share. The cluster scenario checks the same role among the others, over SSH, with a
three-part set, faults and refusals, and that a second run of site.yml (deploy.yml among the rest) changes nothing: its
idempotence step (make molecule SCENARIOS=cluster)."""

import json
import re
import shlex
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import fetch_transfer
from tests.integration.conftest import (SMALL_MASTER, SMALL_MODEL, SMALL_SERVER_KEY, SMALL_SOURCE, SMALL_WAKE_PORT,
                                        SMALL_WORKER, ROOT, serve_model_source)
from tests.tools import containers, llama_cpp

sh = containers.sh
PROMPT = "Once upon a time"
CACHE_DIR = "/var/cache/llama-rpc-worker/main/rpc"


def server(master, path, key=SMALL_SERVER_KEY, body=None):
    """(status, body) of llama-server's answer on the master, at the address and port its unit reads."""
    command = llama_cpp.request_on_master(llama_cpp.container_server_url(master) + path, key, body)
    return llama_cpp.answer(containers.run(master, command)[1].decode())


def test_the_tokens_over_the_worker_are_the_master_alones(small_cluster):
    master = small_cluster[0][SMALL_MASTER]
    status, answer = server(master, "/completion", body={"prompt": PROMPT, "n_predict": 12, "temperature": 0,
                                                         "cache_prompt": False})
    assert status == 200, answer
    through_worker = json.loads(answer)["content"]
    bin_dir = json.loads(containers.read_file(master, "/etc/ansible/facts.d/llama_rpc_build.fact"))["bin_dir"]

    def once():
        code, output = containers.run(master, ["sh", "-c", llama_cpp.greedy_command(bin_dir, SMALL_MODEL, PROMPT, 12)],
                                      split=True)
        written, log = (part.decode("utf-8", "replace") for part in output)
        return code, log, written
    written = llama_cpp.until_complete(once)
    alone = written[len(PROMPT):] if written.startswith(PROMPT) else written
    assert through_worker and alone.rstrip("\n") == through_worker.rstrip("\n"), (alone, through_worker)


def test_the_server_wants_its_key_and_names_the_model(small_cluster):
    master = small_cluster[0][SMALL_MASTER]
    assert server(master, "/v1/models", key="")[0] == 401
    assert server(master, "/v1/models", key="not-the-key")[0] == 401
    status, answer = server(master, "/v1/models")
    assert status == 200 and [model["id"] for model in json.loads(answer)["data"]] == ["tiny"], answer
    # the key is in its own environment file, readable by root only, and in no log: the deploy's, the server's
    assert sh(master, "stat -c '%U %a' /etc/llama-rpc/server-secret.env")[1] == "root 600"
    assert SMALL_SERVER_KEY not in sh(master, "cat /etc/llama-rpc/server.env; journalctl -u llama-server --no-pager")[1]
    assert SMALL_SERVER_KEY not in small_cluster[2]


def test_the_server_listens_on_the_private_address_only_and_is_sandboxed(small_cluster):
    master = small_cluster[0][SMALL_MASTER]
    address = sh(master, "hostname -I")[1].split()[0]
    listeners = sh(master, "ss -Hltn 'sport = :8080'")[1]
    assert f"{address}:8080" in listeners and "0.0.0.0:8080" not in listeners, listeners
    # the wake socket too: a wrong key from another host gets "refused" and starts nothing (a running server stays as it is)
    assert sh(master, f"ss -Hltn 'sport = :{SMALL_WAKE_PORT}'")[1].split()[3] == f"{address}:{SMALL_WAKE_PORT}"
    before = sh(master, "systemctl show llama-server -p InvocationID")[1]
    asked = containers.checked_sh(small_cluster[0][SMALL_WORKER], f"python3 -c \"import socket; s = socket.create_connection(("
                                  f"'{address}', {SMALL_WAKE_PORT}), 5); s.sendall(b'not-the-key\\n'); print(s.recv(64).decode())\"")
    assert asked.strip() == "refused" and sh(master, "systemctl show llama-server -p InvocationID")[1] == before
    wakes = sh(master, "journalctl -u 'llama-server-wake@*' --no-pager -o cat")[1]
    assert "refused a wake from " in wakes and "Invalid environment assignment" not in wakes, wakes[-2000:]
    # the wake's unit as systemd reads it: every unit it starts in one variable, nothing ignored
    verified = sh(master, "systemd-analyze verify /etc/systemd/system/llama-server-wake@.service 2>&1")
    assert verified[0] == 0 and "Invalid" not in verified[1], verified
    environment = sh(master, "systemctl show 'llama-server-wake@x.service' -p Environment --value")[1]
    assert "WAKE_UNITS=llama-server.service llama-server-watchdog.service" in environment, environment
    unit = sh(master, "systemctl show llama-server -p DynamicUser -p Restart")[1]
    assert "DynamicUser=yes" in unit and "Restart=always" in unit, unit
    analysis = sh(master, "systemd-analyze security llama-server.service --no-pager")[1]
    assert containers.security_exposure(analysis) <= 2.0, analysis[-2000:]


def test_the_workers_cache_holds_the_plans_share(small_cluster):
    """The plan (the master's published state) puts layers on the worker, and its tensor cache holds exactly the files
    the plan says it receives by hash, owned by the worker's user and closed to everyone else."""
    hosts = small_cluster[0]
    state = json.loads(sh(hosts[SMALL_MASTER], "cat /etc/ansible/facts.d/llama_rpc_master.fact")[1])
    [node] = state["plan"]["workers"]
    assert node["weights_bytes"] > 0, node
    [planned] = state["cached_hashes"].values()
    cached = sh(hosts[SMALL_WORKER], f"find {CACHE_DIR} -maxdepth 1 -type f -regex '.*/[0-9a-f]*' -printf '%f\\n'")[1].split()
    assert len(planned) > 0 and sorted(cached) == sorted(planned), (cached, planned)
    assert sh(hosts[SMALL_WORKER], f"stat -c '%U %a' {CACHE_DIR}")[1] == "llama-rpc 700"


# --- a model update that fails loses nothing, a rollback fetches nothing, a restart of every node aborts nothing -------
# Each bad update deploys new bytes under the served model's name (v2/ on the model host: another model of the same
# shape, so a switch shows in the tokens) and must be refused with its own cause while the served model's files (inode,
# size, sha256), the worker's cache and llama-server's greedy answer stay as they were.
MODELS = "/var/lib/llama-models"
V2 = {"rpc_master_model_src": SMALL_SOURCE + "/v2/tiny-00001-of-00003.gguf",
      "rpc_master_model_sha256sums": SMALL_SOURCE + "/v2/SHA256SUMS"}
GREEDY = {"prompt": PROMPT, "n_predict": 12, "temperature": 0, "cache_prompt": False}


def greedy(master):
    status, answer = server(master, "/completion", body=GREEDY)
    assert status == 200, answer
    return json.loads(answer)["content"]


def worker_cache(worker):
    return containers.checked_sh(worker, f"ls {CACHE_DIR}").split()


def stream_in_a_unit(master, unit, body):
    """A streamed /completion request run on the master as a transient unit (it outlives this call); its output goes to
    the returned file."""
    command = llama_cpp.request_on_master(llama_cpp.container_server_url(master) + "/completion", SMALL_SERVER_KEY, body)
    output = f"/var/tmp/{unit}.out"
    containers.checked_sh(master, f"systemd-run --collect --unit {unit} --property=StandardOutput=file:{output} "
                                  + shlex.join(command))
    return output


def wait_for_the_unit_to_end(master, unit, timeout, what):
    """Seconds until the transient unit ended; asserts it did within timeout (what names the wait)."""
    began = time.monotonic()
    while containers.sh(master, f"systemctl is-active {unit}")[1].strip() == "active":
        assert time.monotonic() - began < timeout, f"{what}: still running after {timeout} s"
        time.sleep(0.3)
    return time.monotonic() - began


class HeldStream:
    """A streaming request held in the middle while something else happens: its worker paused, as a decode step of
    minutes would be. release() lets the worker go on and returns the whole answer (asserted complete)."""

    def __init__(self, in_use, unit, tokens=64):
        self.master, self.worker, self.unit = in_use.master, in_use.worker, unit
        containers.checked_sh(self.worker, "systemctl kill -s SIGSTOP llama-rpc-worker@main")
        self.output = stream_in_a_unit(self.master, unit, dict(GREEDY, n_predict=tokens, stream=True))
        self.released = False

    def release(self, timeout=120):
        if not self.released:
            self.released = True
            containers.checked_sh(self.worker, "systemctl kill -s SIGCONT llama-rpc-worker@main")
        wait_for_the_unit_to_end(self.master, self.unit, timeout, "the held stream after its worker went on")
        status, streamed = llama_cpp.answer(containers.checked_sh(self.master, f"cat {self.output}"))
        assert status == 200 and streamed.count("data: ") > 1 and '"stop":true' in streamed.replace(" ", ""), streamed[-2000:]
        return streamed


def staged_release(master):
    """The releases staged in .incoming (verified, never placed): {name: files}."""
    listing = containers.sh(master, f"cd {MODELS}/.incoming && for d in *; do [ -d \"$d\" ] && echo \"$d\" $(ls -A \"$d\"); done")[1]
    return {line.split()[0]: sorted(line.split()[1:]) for line in listing.splitlines() if line.strip()}


def host_sent(master):
    """What the model host sent, per file (tests/tools/model_server.py)."""
    return json.loads(containers.checked_sh(master, f"python3 -c \"import urllib.request; print(urllib.request.urlopen("
                                                    f"'{SMALL_SOURCE}/_sent').read().decode())\""))["sent"]


def model_host(master, **settings):
    query = "&".join(f"{key}={value}" for key, value in settings.items())
    containers.checked_sh(master, f"python3 -c \"import urllib.request; urllib.request.urlopen('{SMALL_SOURCE}/_control?{query}')\"")


def update(directory, extra, background=False, master=None):
    """deploy.yml's master part (the build and the worker as they are) with extra vars. With master, what earlier
    updates left half fetched on it goes first (each case starts from nothing fetched)."""
    if master is not None:
        containers.checked_sh(master, f"rm -rf {MODELS}/.incoming/*")
    command = ["ansible-playbook", "-i", str(directory / "hosts.yml"), str(ROOT / "playbooks" / "deploy.yml"),
               "--tags", "rpc_master", "-e", json.dumps(extra)]
    if background:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def in_use(small_cluster):
    """The served model as the first deploy left it: its files, the worker's cache and the greedy answer."""
    hosts, directory, _output = small_cluster
    master, worker = hosts[SMALL_MASTER], hosts[SMALL_WORKER]
    return SimpleNamespace(master=master, worker=worker, directory=directory, files=containers.served_files(master),
                           cache=worker_cache(worker), answer=greedy(master))


def assert_unchanged(in_use, run, *messages):
    output = run.stdout + (run.stderr or "")
    assert run.returncode != 0, output[-3000:]
    for message in messages:
        assert message in output, f"{message!r} not in:\n{output[-3000:]}"
    assert "Nothing the master serves changed: llama-server still serves" in output, output[-3000:]
    # the deploy ended, refused: its hold on the idle stop is gone with it
    assert containers.sh(in_use.master, "test -e /run/llama-rpc-deploy.hold")[0] != 0, "the refused deploy left its hold"
    assert containers.served_files(in_use.master) == in_use.files
    assert worker_cache(in_use.worker) == in_use.cache
    assert greedy(in_use.master) == in_use.answer


def test_an_update_that_fails_leaves_the_served_model_as_it_was(in_use):
    """A part of another set under the set's name (its checksum given, so the checksums pass), a wrong checksum for
    part 2, a part that stops sending and never resumes, a source that refuses midway (after part 1: a token revoked),
    a set the disk cannot hold (refused before any byte), a disk that fills during the download."""
    master = in_use.master
    sums = json.loads(containers.checked_sh(master, "python3 -c \"import hashlib, json, glob; print(json.dumps({f: "
                                                    "hashlib.sha256(open(f, 'rb').read()).hexdigest() for f in "
                                                    "glob.glob('/srv/model-source/*/*.gguf')}))\""))
    v2 = [sums["/srv/model-source/v2/tiny-0000%d-of-00003.gguf" % n] for n in (1, 2, 3)]
    foreign = sums["/srv/model-source/other/tiny-00003-of-00003.gguf"]

    # Part 3 of a model of other shapes, split the same way: its header reads as part 3 of the set, and llama.cpp's own
    # load (the plan, against stand-ins of the worker that llama-server holds) refuses its tensors. llama-server serves
    # on throughout: the same process, and a stream in flight gets its whole answer. The set is never placed: it stays
    # staged, verified, in .incoming.
    pid = containers.server_pid(master)
    held = HeldStream(in_use, "refused-update-stream")
    try:
        reshaped = update(in_use.directory, master=master, extra={
            "rpc_master_model_src": [SMALL_SOURCE + "/v2/tiny-00001-of-00003.gguf", SMALL_SOURCE + "/v2/tiny-00002-of-00003.gguf",
                                     SMALL_SOURCE + "/reshaped/tiny-00003-of-00003.gguf"],
            "rpc_master_model_sha256": v2[:2] + [sums["/srv/model-source/reshaped/tiny-00003-of-00003.gguf"]],
            "rpc_master_model_sha256sums": ""})
    finally:
        held.release()
    assert_unchanged(in_use, reshaped, "llama.cpp's projection of the model failed", "has wrong shape")
    assert containers.server_pid(master) == pid, "llama-server was stopped for a model it refused"
    assert "Pause llama-server" not in reshaped.stdout and "Let the requests in flight end" not in reshaped.stdout
    staged = staged_release(master)
    assert len(staged) == 1 and staged[next(iter(staged))] == [".release.json"] + [
        f"tiny-0000{n}-of-00003.gguf" for n in (1, 2, 3)], staged
    assert containers.sh(master, f"test -e {MODELS}/{next(iter(staged))}")[0] != 0, "the refused set was placed"
    parts = [SMALL_SOURCE + "/v2/tiny-00001-of-00003.gguf", SMALL_SOURCE + "/v2/tiny-00002-of-00003.gguf",
             SMALL_SOURCE + "/other/tiny-00003-of-00003.gguf"]
    mixed = update(in_use.directory, master=master,
                   extra={"rpc_master_model_src": parts, "rpc_master_model_sha256": v2[:2] + [foreign],
                          "rpc_master_model_sha256sums": ""})
    # refused by the run's look ahead (each part's header read from its first bytes), before its download
    assert_unchanged(in_use, mixed, "the set cannot be loaded, by its parts' headers read ahead of their data",
                     "is not part 3 of the set of tiny-00001-of-00003.gguf", "Nothing of it was downloaded")
    assert "GGUF files only" not in mixed.stdout + mixed.stderr

    wrong = update(in_use.directory, master=master,
                   extra=dict(V2, rpc_master_model_sha256=[v2[0], "b" * 64, v2[2]], rpc_master_model_sha256sums=""))
    assert_unchanged(in_use, wrong, "part 2 (tiny-00002-of-00003.gguf) has sha256 %s after its download, not %s" % (v2[1], "b" * 64))

    model_host(master, stall="v2/tiny-00002-of-00003.gguf:4000000")
    stalled = update(in_use.directory, master=master,
                     extra=dict(V2, rpc_master_model_read_timeout=2, rpc_master_model_download_attempts=2))
    model_host(master, reset=1)
    assert_unchanged(in_use, stalled, "part 2 (tiny-00002-of-00003.gguf) could not be fetched after 2 attempts in a row "
                                      "(timed out)")

    sent = sum(count for name, count in host_sent(master).items() if name.endswith(".gguf"))
    first_part = int(containers.checked_sh(master, "stat -c %s /srv/model-source/v2/tiny-00001-of-00003.gguf"))
    # its first byte asked of each part, their headers read ahead (each within the first read), then part 1
    headers = 3 * fetch_transfer.HEADER_FIRST_READ
    model_host(master, refuse_after=sent + 3 + headers + first_part, code=403)
    refused = update(in_use.directory, master=master, extra=dict(V2, rpc_master_model_download_parallel=1))
    model_host(master, reset=1)
    assert_unchanged(in_use, refused, "the source refused part 2 (tiny-00002-of-00003.gguf) with the token given (HTTP 403)")

    # the disk the download goes to: too small for the set, then filled by something else while it downloads
    containers.checked_sh(master, f"rm -rf {MODELS}/.incoming/* && mount -t tmpfs -o size=100m tmpfs {MODELS}/.incoming")
    try:
        before = host_sent(master)
        small = update(in_use.directory, V2)
        assert_unchanged(in_use, small, "The model needs 0.1", "GB more in /var/lib/llama-models/.incoming/tiny-",
                         "which has 0.10 GB free", "Free space there, or set rpc_master_models_dir to a larger disk. "
                         "Nothing was fetched.")
        assert {name: count - before.get(name, 0) for name, count in host_sent(master).items()
                if count != before.get(name, 0) and name.endswith(".gguf")} == {f"v2/tiny-0000{n}-of-00003.gguf": 1 for n in (1, 2, 3)}
        containers.checked_sh(master, f"mount -o remount,size=200m {MODELS}/.incoming")
        model_host(master, rate=4_000_000)  # as below: no part ends before the disk fills
        filling = update(in_use.directory, V2, background=True)
        wait_for_partial(master, 8_000_000)
        containers.checked_sh(master, f"fallocate -l $(( $(stat -f -c '%a * %S' {MODELS}/.incoming) )) {MODELS}/.incoming/filler "
                                      f"|| dd if=/dev/zero of={MODELS}/.incoming/filler bs=1M 2>/dev/null; true")
        output, _stderr = filling.communicate(timeout=600)
        model_host(master, reset=1)
        assert_unchanged(in_use, SimpleNamespace(returncode=filling.returncode, stdout=output, stderr=""),
                         "no space left in /var/lib/llama-models/.incoming/tiny-", "the next run resumes")
    finally:
        containers.sh(master, f"umount {MODELS}/.incoming")


SPECULATIVE = dict(GREEDY, n_predict=48)


def metric(text, name):
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


def test_speculative_decoding_in_tensor_mode_with_the_masters_share_writes_the_same_text(in_use):
    """One update of what is served turns on speculative decoding and tensor mode with the master's share
    (rpc_master_tensor_on_master), and one turns both off again. With greedy sampling, the text with both equals the
    layer split's without (the master alone's: the first test): a draft fetched as a release of its own (the served set
    itself, with the model's token and checksum file, so most drafts are accepted), each layer split between the worker
    and the master's own ggml-rpc-server, installed by the rpc_worker role, bound to loopback, listed first and named by
    the plan. The drafts' counters reach /metrics. The worker killed mid-stream ends the request with its name in
    llama-server's journal, and the services' restarts bring the same text back. stop.yml and start.yml take the master's RPC server down and up with
    llama-server, and a draft lost from disk after the deploy is named by the start and by llama-server's start script.
    Back in layer mode, llama-server serves over the worker alone, then the master's RPC server stops. (An n-gram kind's
    text: tests/integration/test_speculative.py; the refusals of a foreign draft and of a draft URL that fails, on a
    cluster that speculates: molecule/cluster/tests/test_speculation.py; tensor mode's logits against llama.cpp's own:
    tests/integration/test_tensor_parallel.py.)"""
    record_before = tensor_record(in_use.master)
    try:
        speculation_cases(in_use)
    finally:
        # back to the layer split without speculation whatever failed above: the later cases start from it
        back = update(in_use.directory, master=in_use.master, extra={})
    assert back.returncode == 0, back.stdout[-3000:]
    assert "LLAMA_ARG_SPEC" not in containers.checked_sh(in_use.master, "cat /etc/llama-rpc/server.env")
    workers, mode = served_workers(in_use.master)
    assert mode == "layer" and SHARE not in workers, (workers, mode)
    assert sh(in_use.master, "systemctl is-active llama-rpc-worker@main")[1].strip() != "active"
    assert greedy(in_use.master) == in_use.answer
    # The draft's release linked the served parts (the same bytes, verified): their status change had the tensor record
    # written again, with the same hashes (its identity of each part holds the new change time). Every other file's
    # bytes are as they were; the later cases start from here.
    after = containers.served_files(in_use.master)
    assert {path: found[1:] for path, found in after.items() if not path.endswith(".tensors.json")} == \
        {path: found[1:] for path, found in in_use.files.items() if not path.endswith(".tensors.json")}
    assert tensor_record(in_use.master)["tensors"] == record_before["tensors"]
    in_use.files = after


SHARE = "127.0.0.1:50052"  # the master's own RPC server (rpc_master_tensor_on_master): rpc_worker's port, on loopback


def served_workers(master):
    """llama-server's worker list (LLAMA_ARG_RPC) and its split mode, as its settings file has them."""
    env = containers.checked_sh(master, "cat /etc/llama-rpc/server.env")
    mode = re.search(r"^LLAMA_ARG_SPLIT_MODE=(\S+)$", env, re.M)
    return re.search(r"^LLAMA_ARG_RPC=(\S+)$", env, re.M).group(1).split(","), mode.group(1) if mode else "layer"


def tensor_record(master):
    """The served model's record of its tensor hashes (rpc_master writes it beside the model)."""
    state = json.loads(containers.read_file(master, "/etc/ansible/facts.d/llama_rpc_master.fact"))
    model = Path(state["model_path"])
    return json.loads(containers.read_file(master, str(model.parent / f".{model.name}.tensors.json")))


def speculation_cases(in_use):
    """The cases of the test above, in the order they run on the server in use."""
    master = in_use.master
    status, answer = server(master, "/completion", body=SPECULATIVE)
    assert status == 200, answer
    plain = json.loads(answer)["content"]

    drafted = update(in_use.directory, master=master, extra={
        "rpc_master_spec_type": "draft-simple", "rpc_master_spec_draft_src": SMALL_SOURCE + "/tiny-00001-of-00003.gguf",
        "rpc_master_spec_draft_sha256sums": SMALL_SOURCE + "/SHA256SUMS", "rpc_master_spec_draft_max": 4,
        "rpc_master_split_mode": "tensor", "rpc_master_tensor_on_master": True})
    assert drafted.returncode == 0, drafted.stdout[-3000:]
    workers, mode = served_workers(master)
    assert mode == "tensor" and workers[0] == SHARE and len(workers) == 2, (workers, mode)
    listening = containers.checked_sh(master, "ss -Hltn 'sport = :50052'").split()
    assert SHARE in listening and not [address for address in listening if address.endswith(":50052")
                                       and address != SHARE], listening
    assert sh(master, "systemctl is-active llama-rpc-worker@main")[1].strip() == "active"
    plan = json.loads(containers.read_file(master, "/etc/ansible/facts.d/llama_rpc_master.fact"))["plan"]
    assert plan["split_mode"] == "tensor" and [node.get("on_master", False) for node in plan["workers"]] == [True, False]
    assert plan["workers"][0]["name"] == SHARE and plan["workers"][0]["need_bytes"] <= plan["workers"][0]["usable_bytes"]
    env = containers.checked_sh(master, "cat /etc/llama-rpc/server.env")
    assert "LLAMA_ARG_SPEC_TYPE=draft-simple" in env and "LLAMA_ARG_N_GPU_LAYERS_DRAFT=0" in env, env
    draft_path = re.search(r"^LLAMA_ARG_SPEC_DRAFT_MODEL=(\S+)$", env, re.M).group(1)
    assert draft_path.startswith(MODELS + "/drafts/tiny-") and draft_path.endswith("/tiny-00001-of-00003.gguf"), draft_path
    state = json.loads(containers.read_file(master, "/etc/ansible/facts.d/llama_rpc_master.fact"))
    assert state["plan"]["draft"]["bytes"] > 0 and state["plan"]["master"]["reserved_bytes"] >= state["plan"]["draft"]["bytes"]
    assert "and the draft model of speculative decoding, " in drafted.stdout and " MiB of the master's share (" in drafted.stdout
    status, answer = server(master, "/completion", body=SPECULATIVE)
    assert status == 200, answer
    assert json.loads(answer)["content"] == plain
    status, metrics = server(master, "/metrics")
    assert status == 200, metrics
    assert metric(metrics, "llamacpp:spec_decode_num_draft_tokens_total") > 0, metrics
    assert metric(metrics, "llamacpp:spec_decode_num_accepted_tokens_total") > 0, metrics

    worker_lost_mid_stream(in_use, workers[1], plain)

    # the draft lost from disk after the deploy: the start names it (llama-server would fail and start again without end)
    before_stop = containers.checked_sh(master, "date +%s").strip()
    assert playbook(in_use.directory, "stop.yml").returncode == 0
    containers.checked_sh(master, f"mv {draft_path} {draft_path}.gone")
    try:
        lost = playbook(in_use.directory, "start.yml")
        output = lost.stdout + lost.stderr
        assert lost.returncode != 0 and f"llama-server cannot start on {SMALL_MASTER}: the draft model of speculative " \
            f"decoding {draft_path} is no longer on the master. Run playbooks/deploy.yml, which fetches it again (or set " \
            "rpc_master_spec_type: none)." in " ".join(output.split()), output[-3000:]
        assert containers.sh(master, "systemctl is-active llama-server")[1].strip() != "active"
        # stop.yml took the master's RPC server down after llama-server, start.yml brought it up before
        assert sh(master, "systemctl is-active llama-rpc-worker@main")[1].strip() == "active"
        journal = containers.checked_sh(master, f"journalctl -u llama-rpc-worker@main --no-pager -o cat --since @{before_stop}")
        assert "Stopped" in journal and "Started" in journal.split("Stopped", 1)[1], journal[-2000:]
        journal = containers.checked_sh(master, "journalctl -u llama-server --no-pager -o cat")
        assert f"llama-server not started (systemd tries again): {draft_path}, the draft model" in journal, journal[-2000:]
    finally:
        containers.checked_sh(master, f"mv {draft_path}.gone {draft_path}")


def worker_lost_mid_stream(in_use, endpoint, plain):
    """kill -9 of the worker while llama-server streams in tensor mode: the request ends, no hang; llama-server's journal
    names the worker it lost (the rpc_lost_worker patch) and aborts; systemd brings both back (the worker's unit, then
    llama-server, which waits for it) and the cluster writes the same text again."""
    master, worker = in_use.master, in_use.worker
    units = ((master, "llama-server"), (worker, "llama-rpc-worker@main"))
    restarts = [int(containers.checked_sh(host, f"systemctl show {unit} -p NRestarts --value")) for host, unit in units]
    since = containers.checked_sh(master, "date +%s").strip()
    output = stream_in_a_unit(master, "lost-worker-stream", dict(GREEDY, n_predict=100000, ignore_eos=True, stream=True))
    deadline = time.monotonic() + 60
    while metric(server(master, "/metrics")[1], "llamacpp:requests_processing") < 1:
        assert time.monotonic() < deadline, "the streamed request never started"
        time.sleep(0.3)
    time.sleep(1)  # its tokens go through both RPC servers
    containers.checked_sh(worker, "systemctl kill -s KILL llama-rpc-worker@main")
    killed = time.monotonic()
    ended = wait_for_the_unit_to_end(master, "lost-worker-stream", 90, "the request after its worker was lost")
    # the stream's headers came before the kill, so the cut shows as its body ending short
    streamed = containers.checked_sh(master, f"cat {output}")
    assert "IncompleteRead(" in streamed and '"stop":true' not in streamed.replace(" ", ""), streamed[-2000:]
    journal = containers.checked_sh(master, f"journalctl -u llama-server --no-pager -o cat --since @{since}")
    assert f"Remote RPC server {endpoint} crashed or returned malformed response" in journal, journal[-3000:]
    deadline = time.monotonic() + 180
    while True:
        status, answer = server(master, "/completion", body=SPECULATIVE)
        if status == 200:
            break
        assert time.monotonic() < deadline, f"llama-server did not serve again after its worker was lost: {answer}"
        time.sleep(1)
    serving = time.monotonic() - killed
    assert json.loads(answer)["content"] == plain
    for (host, unit), before in zip(units, restarts):
        assert int(containers.checked_sh(host, f"systemctl show {unit} -p NRestarts --value")) > before, unit
    print(f"tensor mode, the worker lost mid-stream: the request ended {ended:.1f} s after the kill, llama-server served "
          f"the same text again {serving:.1f} s after it")


def downloading(master):
    """Whether a process on the master holds a download's part open (between two parts none does, for a moment)."""
    return containers.sh(master, f"for fd in /proc/[0-9]*/fd/*; do case $(readlink $fd) in {MODELS}/.incoming/*.partial) "
                                 "echo open;; esac; done")[1] != ""


def download_ends(master, since, quiet=3.0, timeout=60):
    """Seconds from `since` to the last moment a download's part was open, once none has been for `quiet` seconds."""
    last_open = since
    while time.monotonic() - since < timeout:
        if downloading(master):
            last_open = time.monotonic()
        elif time.monotonic() - last_open >= quiet:
            break
        time.sleep(0.5)
    return last_open - since


class Running:
    """A playbook run in the background, its output read as it comes."""

    def __init__(self, process):
        self.process, self.lines = process, []
        self.reader = threading.Thread(target=lambda: self.lines.extend(process.stdout), daemon=True)
        self.reader.start()

    def wait_for(self, text, timeout):
        deadline = time.monotonic() + timeout
        while not any(text in line for line in list(self.lines)):
            assert self.process.poll() is None and time.monotonic() < deadline, "".join(self.lines)[-4000:]
            time.sleep(0.5)

    def finish(self, timeout):
        self.process.wait(timeout=timeout)
        self.reader.join(timeout=30)
        return SimpleNamespace(returncode=self.process.returncode, stdout="".join(self.lines), stderr="")


# The bytes under .incoming that have landed: a whole file's size, or for a download by byte ranges (a file of its full
# size from the start) what its ranges' record says landed.
LANDED = ("import glob, json, os\n"
          "def landed(path):\n"
          "    try:\n"
          "        return sum(span[2] for span in json.load(open(path + '.ranges'))['ranges'])\n"
          "    except OSError:\n"
          "        return os.path.getsize(path)\n"
          "files = [path for path in glob.glob('%s/.incoming/*/*') if not path.endswith(('.ranges', '.tmp'))]\n"
          "print(max([0] + [landed(path) for path in files if path.endswith('.partial')]), sum(map(landed, files)))")


def landed_bytes(master):
    """(the most bytes one download under way has landed, the bytes landed under .incoming in all)."""
    most, total = containers.checked_sh(master, "python3 -c %s" % shlex.quote(LANDED % MODELS)).split()
    return int(most), int(total)


def wait_for_partial(master, size, timeout=120):
    """Until a download under way has landed size bytes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if landed_bytes(master)[0] >= size:
            return
        time.sleep(0.3)
    raise AssertionError(f"no download reached {size} bytes in {timeout} s")


def test_a_deploy_killed_mid_download_resumes_then_switches_and_a_rollback_fetches_nothing(in_use):
    """kill -9 of the deploy and of the download on the master in the middle of a part: the served model as it was. A
    good deploy then completes from where the cut one stopped (the host sends the set about once), switches
    llama-server to the new model in one step (its tokens are another model's), and keeps the first one and its tensors
    in the worker's cache; a rollback (rpc_master_model_release=previous) switches back with no byte fetched and
    nothing sent to the worker: the first answer again."""
    master, worker = in_use.master, in_use.worker
    # slow enough that no part (45 MB, over 5 connections of byte ranges) ends in the seconds a busy machine takes to
    # see a partial one and kill, nor the set in the seconds the killed run's download outlives it (its lease: up to
    # 25 s): about 1 MB/s a part
    model_host(master, rate=200_000)
    killed = update(in_use.directory, V2, background=True, master=master)
    wait_for_partial(master, 8_000_000)
    killed.kill()
    killed.wait(timeout=60)
    killed_at = time.monotonic()
    # nothing of the killed run goes on on the master: its download stops once its lease (15 s) runs out
    outlived = download_ends(master, killed_at)
    print(f"the killed run's download stopped {outlived:.1f} s after the kill")
    assert not downloading(master) and outlived <= 25, outlived
    model_host(master, reset=1)
    assert containers.served_files(master) == in_use.files and greedy(master) == in_use.answer
    had = landed_bytes(master)[1]
    before = host_sent(master)

    # the switch waits for a stream in flight (held by its paused worker) to end before it stops llama-server
    held = HeldStream(in_use, "switch-stream")
    running = Running(update(in_use.directory, V2, background=True))
    try:
        running.wait_for("Let the requests in flight end before llama-server stops", timeout=600)
        time.sleep(5)
    finally:
        held.release()
    good = running.finish(timeout=600)
    assert good.returncode == 0, good.stdout[-4000:]
    said = re.search(r"llama-server restarts with new settings \(([^)]*)\)", good.stdout)
    # the model's settings alone (v2's parts have v1's sizes, and no checksum is given for either)
    assert said and said.group(1).split(", ") == ["model", "model_mtimes"], said and said.group(0)
    assert "llama-server stops for the pre-flight: the requests in flight ended within" in good.stdout, good.stdout[-4000:]
    total = sum(int(size) for size in containers.checked_sh(master, "stat -c %s /srv/model-source/v2/tiny-0000?-of-00003.gguf").split())
    sent = sum(count - before.get(name, 0) for name, count in host_sent(master).items()
               if name.startswith("v2/") and name.endswith(".gguf"))
    print(f"v2 across a kill: {had} of {total} bytes on the master at the kill, {sent} sent after it")
    # and one byte per part asked twice, and the pre-flight's read of each unfinished part's header (its first 64 KiB)
    ahead = 3 * fetch_transfer.HEADER_FIRST_READ
    assert 0 < had < total and total - had <= sent <= total - had + 6 + ahead, (had, sent, total)
    switched = greedy(master)
    assert switched != in_use.answer and containers.served_files(master) != in_use.files
    assert all(name in worker_cache(worker) for name in in_use.cache), "the first model's tensors were not kept"
    assert "Kept for a rollback (rpc_master_model_release=previous, or a name): tiny-" in good.stdout

    sent = host_sent(master)
    back = update(in_use.directory, dict(V2, rpc_master_model_release="previous"))
    assert back.returncode == 0, (back.stdout + back.stderr)[-4000:]
    assert host_sent(master) == sent
    assert containers.served_files(master) == in_use.files and greedy(master) == in_use.answer
    sends = containers.task_output(back.stdout, "graviton.llama_rpc.rpc_master : Send what the caches lack")
    assert "skipping: [" in sends and "included: " not in sends, sends


def playbook(directory, name):
    return containers.run_playbook(directory / "hosts.yml", ROOT / "playbooks" / name, {})


def test_a_stopped_cluster_starts_with_everything_it_had_and_llama_server_waits_for_its_worker(in_use):
    """playbooks/stop.yml (the services), a second time (nothing changes), then the machines stopped and started again,
    the master first, as make demo-stop and demo-start do; then playbooks/start.yml. The worker's service is made slower to
    listen than the master's llama-server to start (a drop-in delays it 8 s: its host up, its port not yet open, refuses
    the master): llama-server waits for it instead of aborting. Its journal since has one start, no failed connection and
    no abort; it serves the same answer; its load sent hashes, not weights (the master's bytes sent since its boot); the
    worker's cache files are the ones they were, with their times; nothing was built, fetched or checked. Last, a worker
    that does not come back: named by start.yml, llama-server stopped, nothing deleted."""
    master, worker = in_use.master, in_use.worker
    slow = "/etc/systemd/system/llama-rpc-worker@.service.d/zz-test-slow-start.conf"
    cache = containers.checked_sh(worker, f"find {CACHE_DIR} -type f -printf '%f %T@\\n' | sort")
    bin_dir = json.loads(containers.read_file(master, "/etc/ansible/facts.d/llama_rpc_build.fact"))["bin_dir"]
    build = containers.checked_sh(master, f"stat -L -c '%n %Y %i' {bin_dir}/*")
    stopped = playbook(in_use.directory, "stop.yml")
    assert stopped.returncode == 0, (stopped.stdout + stopped.stderr)[-3000:]
    changed = containers.changed_per_host(stopped.stdout)
    assert (changed[SMALL_MASTER], changed[SMALL_WORKER]) == (1, 1), stopped.stdout[-3000:]
    assert containers.sh(master, "systemctl is-active llama-server")[1] == "inactive"
    assert containers.sh(worker, "systemctl is-active llama-rpc-worker@main")[1] == "inactive"
    again = playbook(in_use.directory, "stop.yml")
    changed = containers.changed_per_host(again.stdout)
    assert again.returncode == 0 and (changed[SMALL_MASTER], changed[SMALL_WORKER]) == (0, 0), again.stdout[-3000:]
    assert f"llama-server on {SMALL_MASTER} is stopped already; nothing changes." in again.stdout, again.stdout[-3000:]

    containers.checked_sh(worker, f"mkdir -p {Path(slow).parent} && printf '[Service]\\nExecStartPre=/bin/sleep 8\\n' > {slow}")
    since = containers.checked_sh(master, "date +%s")
    try:
        containers.stop_cluster([master, worker])
        containers.start_cluster([master, worker])
        # the hosts started here, as make demo-start starts its containers: the llama-server their boot started is timed
        started = containers.run_playbook(in_use.directory / "hosts.yml", ROOT / "playbooks" / "start.yml",
                                          {"start_hosts_started": True})
    finally:
        containers.checked_sh(worker, f"rm -f {slow} && systemctl daemon-reload")
        serve_model_source(master)  # the test's model host, a transient unit, is gone with the restart
    output = started.stdout + started.stderr
    assert started.returncode == 0, output[-3000:]
    first_token = re.search(r"gave its first token ([0-9.]+) s after the start began", output)
    assert first_token, output[-3000:]
    print(f"stopped and started: the first token {first_token.group(1)} s after start.yml began")
    assert "llama_build" not in output and "model_fetch" not in output and "Fetch" not in output
    # (a container shares the host's boot: the journal since the stop, not since the boot)
    journal = containers.checked_sh(master, f"journalctl -u llama-server --since @{int(since) + 1} --no-pager -o cat")
    assert journal.count("Started llama-server.service") == 1, journal[-3000:]
    assert "Failed to connect" not in journal and "ABRT" not in journal and "core-dump" not in journal, journal[-3000:]
    assert "is not used" not in journal, journal[-3000:]  # the record the deploy wrote was trusted
    assert greedy(master) == in_use.answer
    model_bytes = sum(size for _inode, size, _sha in ((int(a), int(b), c) for a, b, c in containers.served_files(master).values()))
    sent = int(containers.checked_sh(master, "cat /sys/class/net/$(ip -o route show default | awk '{print $5}')/statistics/tx_bytes"))
    print(f"the master sent {sent} bytes since its boot, for a {model_bytes}-byte model ({100 * sent / model_bytes:.1f}%)")
    assert sent <= 0.05 * model_bytes, (sent, model_bytes)
    assert containers.checked_sh(worker, f"find {CACHE_DIR} -type f -printf '%f %T@\\n' | sort") == cache
    assert containers.checked_sh(master, f"stat -L -c '%n %Y %i' {bin_dir}/*") == build
    # and it takes the hashes from the record (the master's known-hashes build): llama-server started again with the
    # model out of the page cache reads only what it keeps, none of the bytes of the tensors its worker holds
    parts = [path for path in containers.served_files(master) if path.endswith(".gguf")]
    record = json.loads(containers.checked_sh(master, "cat %s" % shlex.quote(
        str(Path(parts[0]).parent / (".%s.tensors.json" % Path(sorted(parts)[0]).name)))))
    hashed = sum(tensor["size"] for tensor in record["tensors"])
    containers.checked_sh(master, "systemctl stop llama-server && python3 -c \"import os, sys\n"
                                  "for p in sys.argv[1:]:\n fd = os.open(p, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, "
                                  "os.POSIX_FADV_DONTNEED); os.close(fd)\" " + " ".join(map(shlex.quote, parts))
                          + " && systemctl start llama-server")
    for _attempt in range(120):
        if server(master, "/health")[0] == 200:
            break
        time.sleep(0.5)
    read = sum(int(containers.checked_sh(master, f"fincore -b -n -o RES {shlex.quote(path)}") or 0) for path in parts)
    total = sum(int(size) for _inode, size, _sha in (containers.served_files(master)[path] for path in parts))
    print(f"llama-server's start read {read} of the model's {total} bytes ({hashed} in the worker's tensors)")
    assert read <= total - hashed + (2 << 20), (read, total, hashed)
    # a start of the running cluster: it says so, and changes nothing
    running = playbook(in_use.directory, "start.yml")
    changed = containers.changed_per_host(running.stdout)
    assert running.returncode == 0 and (changed[SMALL_MASTER], changed[SMALL_WORKER]) == (0, 0), running.stdout[-3000:]
    assert f"llama-server on {SMALL_MASTER} is started already; nothing changes." in running.stdout, running.stdout[-3000:]
    assert "gave its first token" not in running.stdout

    # A worker that does not come back (its service runs but never listens: a worker host that fails outright fails
    # start.yml's worker play, which names it, before the master's): named, llama-server stopped (it never serves
    # without it); nothing deleted. Then the worker and llama-server are started by hand, as after the fix.
    broken = "/etc/systemd/system/llama-rpc-worker@.service.d/zz-test-broken.conf"
    containers.checked_sh(master, "systemctl stop 'llama-server*.service'")
    containers.checked_sh(worker, f"systemctl stop llama-rpc-worker@main && mkdir -p {Path(broken).parent} && "
                                  f"printf '[Service]\\nExecStart=\\nExecStart=/bin/sleep infinity\\n' > {broken} && systemctl daemon-reload")
    try:
        partial = containers.run_playbook(in_use.directory / "hosts.yml", ROOT / "playbooks" / "start.yml",
                                          {"rpc_master_server_start_timeout": 8})
        output = partial.stdout + partial.stderr
        assert partial.returncode != 0, output[-3000:]
        assert re.search(r"llama-server did not answer within rpc_master_server_start_timeout \(8 s\) and is stopped: 1 of 1 "
                         r"workers did not come back \(\S+ is refused\), and its plan puts layers on every worker", output), output[-3000:]
        assert containers.sh(master, "systemctl is-active llama-server")[1] == "inactive"
        assert containers.served_files(master) == in_use.files
        assert containers.checked_sh(worker, f"find {CACHE_DIR} -type f -printf '%f %T@\\n' | sort") == cache
    finally:
        containers.checked_sh(worker, f"rm -f {broken} && systemctl daemon-reload && systemctl restart llama-rpc-worker@main")
        containers.checked_sh(master, "systemctl start llama-server && { ! systemctl cat llama-server-watchdog >/dev/null 2>&1 "
                                      "|| systemctl start llama-server-watchdog; }")
    for _attempt in range(60):
        if server(master, "/health")[0] == 200:
            break
        time.sleep(1)
    assert greedy(master) == in_use.answer


def idle_stop_journal(master, since):
    return containers.checked_sh(master, f"journalctl -u llama-server-idle-stop --since @{since} --no-pager -o cat")


def published(master):
    return json.loads(containers.read_file(master, "/etc/ansible/facts.d/llama_rpc_master.fact"))


def test_an_idle_cluster_stops_itself_but_never_during_a_request(in_use):
    """rpc_master_idle_stop_minutes=0.2 (12 s; a check every 2 s), deployed: a streaming request held in the middle for
    twice that (its worker paused, as a decode step of minutes would) keeps llama-server up, and gets its whole answer
    once the worker goes on; 12 s after it ends the idle stop stops llama-server and writes the figures it read. The
    deploy's hold is gone once it ends. Then the idle stop is turned off again, and the deploy starts llama-server.
    The same two deploys flip the settings the master publishes beside its plan (the wake port off and on, llama-server's
    port, the load rates): its fact follows each, though the plan stays (the server is not planned again)."""
    master = in_use.master
    before = published(master)
    flipped = {"rpc_master_wake_port": 0, "rpc_master_server_port": 8082,
               "rpc_master_load_rates": {"master_disk_read_mib_s": 125, "worker_disk_read_mib_s": 125,
                                         "worker_disk_write_mib_s": 125, "network_gbit_s": 1}}
    deployed = update(in_use.directory, dict(flipped, rpc_master_idle_stop_minutes=0.2, rpc_master_watchdog_interval=2))
    assert deployed.returncode == 0, (deployed.stdout + deployed.stderr)[-3000:]
    assert containers.sh(master, "test -e /run/llama-rpc-deploy.hold")[0] != 0, "the deploy left its hold"
    now = published(master)
    assert (now["wake_port"], now["server_url"].rsplit(":", 1)[1], now["plan"]) == (0, "8082", before["plan"]), now
    assert now["load_prediction"]["cold"]["seconds"] > before["load_prediction"]["cold"]["seconds"], (now, before)
    assert containers.sh(master, "systemctl is-active llama-server-wake.socket")[1] != "active"
    since = int(containers.checked_sh(master, "date +%s"))
    held = HeldStream(in_use, "idle-stream")
    try:
        time.sleep(25)  # twice the bound, with the request in progress
        assert containers.sh(master, "systemctl is-active llama-server")[1] == "active", idle_stop_journal(master, since)
    finally:
        # (its end is not what is measured: on a machine this busy the rest of the answer took over 30 s)
        held.release()
    ended = time.monotonic()
    while containers.sh(master, "systemctl is-active llama-server")[1] == "active" and time.monotonic() - ended < 40:
        time.sleep(1)
    stopped_after = time.monotonic() - ended
    journal = idle_stop_journal(master, since)
    try:
        assert containers.sh(master, "systemctl is-active llama-server")[1] == "inactive", journal
        decision = re.search(r"llama-server has served no request for (\d+)s \((requests_processing 0, requests_deferred 0, "
                             r"n_decode_total \d+, .*tokens_predicted_total \d+)\): stopping the cluster", journal)
        assert decision and 12 <= int(decision.group(1)) <= 16, journal
        print(f"idle stop: llama-server stopped {stopped_after:.0f} s after the request ended; the journal: {decision.group(0)}")
        # the server saw the stream end before this test did (the client reads the last chunk, then joins its thread):
        # up to one look (2 s) earlier than 12 s from here
        assert 12 - 2 <= stopped_after <= 20, (stopped_after, journal)
    finally:
        restored = update(in_use.directory, {})
    assert restored.returncode == 0, (restored.stdout + restored.stderr)[-3000:]
    assert greedy(master) == in_use.answer
    again = published(master)

    def placement(fact):
        return fact["plan"]["n_gpu_layers"], fact["plan"]["slots"], [worker["layers"] for worker in fact["plan"]["workers"]]
    assert (again["wake_port"], again["server_url"], again["load_prediction"], placement(again)) == (
        SMALL_WAKE_PORT, before["server_url"], before["load_prediction"], placement(before)), again
