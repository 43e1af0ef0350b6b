"""The rpc_master role on the smallest cluster, for a change to it (`make role ROLE=rpc_master`, minutes warm): a
master and one worker, fresh systemd hosts, deployed by playbooks/deploy.yml (conftest.py, small_cluster). llama-server
over the worker writes the greedy tokens of llama.cpp on the master alone, wants its key and names the model, the
worker's cache holds the plan's share, and a second deploy changes nothing. The cluster scenario checks the same role
among the others, over SSH, with a three-part set, faults and refusals (make molecule SCENARIOS=cluster)."""

import json

from tests.integration.conftest import SMALL_MASTER, SMALL_MODEL, SMALL_SERVER_KEY, SMALL_WORKER, ROOT
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


def test_a_second_deploy_changes_nothing(small_cluster):
    _hosts, directory, _output = small_cluster
    again = containers.run_playbook(directory / "hosts.yml", ROOT / "playbooks" / "deploy.yml", {}, timeout=1200)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert containers.changed_per_host(again.stdout) == {SMALL_MASTER: 0, SMALL_WORKER: 0}, again.stdout[-4000:]
