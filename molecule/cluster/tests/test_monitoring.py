"""Watching the cluster (role monitoring, run by site.yml with monitoring_enabled): each master's Prometheus scrapes
every node of its cluster (cluster_b's worker through the WireGuard tunnel) and its llama-server with its key, every
target is up and the cluster's own figures are there; a worker's RPC service stopped raises its alert within the
rule's time and resolves when it is back, and a frozen one (its unit active) is named by its own alert and restarted
by its watchdog, with a client connected and with none; an outsider
reaches no exporter and no Prometheus; and no file a non-root
user reads holds llama-server's key. (The scenario scrapes every 3 s, writes the figures every 10 s and fires a down alert after 6 s: molecule.yml.)

What a test reads or does on a host goes through docker."""

import json
import os
import shlex
import sys
import time
import urllib.parse
from pathlib import Path

import docker
import pytest
import testinfra.utils.ansible_runner

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
sys.path.insert(0, str(ROOT))
from tests.tools import containers, llama_cpp  # noqa: E402  pylint: disable=wrong-import-position
from tests.tools.outsider import Outsider, interface_address  # noqa: E402  pylint: disable=wrong-import-position

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
CLUSTERS = {master: [master] + RUNNER.get_hosts(group.replace("_master", "_workers"))
            for group in ("cluster_a_master", "cluster_b_master") for master in RUNNER.get_hosts(group)}
[PLAIN_MASTER] = RUNNER.get_hosts("cluster_a_master")
PLAIN_WORKER = RUNNER.get_hosts("cluster_a_workers")[0]
testinfra_hosts = [PLAIN_MASTER]
SETTINGS = RUNNER.get_variables(PLAIN_MASTER)
KEY = SETTINGS["rpc_master_server_api_key"]
# the figures' timer, a scrape, the rule's bound (seconds: 6s in molecule.yml) and an evaluation (one per scrape)
ALERT_BOUND = (int(SETTINGS["monitoring_metrics_interval"]) + 2 * int(SETTINGS["monitoring_scrape_interval"])
               + int(SETTINGS["monitoring_alert_down_for"].rstrip("s")))
NETWORK = "llama-rpc-master"  # the scenario's one network (molecule.yml)


@pytest.fixture(scope="module", name="docker_hosts")
def fixture_docker_hosts():
    client = docker.from_env()
    return client, {name: client.containers.get(name) for nodes in CLUSTERS.values() for name in nodes}


def prometheus(master, path, **query):
    """Prometheus's API on the master's loopback: the answer's data."""
    url = "http://127.0.0.1:9090/api/v1/" + path + ("?" + urllib.parse.urlencode(query) if query else "")
    answer = containers.checked_sh(master, f"python3 -c \"import urllib.request; print(urllib.request.urlopen('{url}').read().decode())\"")
    return json.loads(answer)["data"]


def until(check, timeout, step=1.0):
    """check()'s first true answer within timeout seconds, and the seconds it took; (last answer, None) when none."""
    started = time.monotonic()
    while True:
        answer = check()
        if answer:
            return answer, time.monotonic() - started
        if time.monotonic() - started > timeout:
            return answer, None
        time.sleep(step)


def test_every_node_and_llama_server_is_scraped_with_the_clusters_own_figures(docker_hosts):
    _client, hosts = docker_hosts
    for master, nodes in CLUSTERS.items():
        def all_up():
            targets = prometheus(hosts[master], "targets")["activeTargets"]
            return targets if targets and all(target["health"] == "up" for target in targets) else None
        targets, _took = until(all_up, 60)
        assert targets, prometheus(hosts[master], "targets")["activeTargets"]
        by_job = {}
        for target in targets:
            by_job.setdefault(target["labels"]["job"], set()).add(target["labels"].get("node"))
        assert by_job == {"prometheus": {master}, "node": set(nodes), "llama-server-" + master: {master}}, by_job
        # the cluster's own figures: every service up, each worker's cache, the master's load beside its prediction
        expected = {**{(node, "llama-rpc-worker@main.service"): "1" for node in nodes[1:]}, (master, "llama-server.service"): "1"}

        def units_active():  # (an earlier test's restart of llama-server shows until the next figures' run)
            found = {(sample["metric"]["node"], sample["metric"]["unit"]): sample["value"][1]
                     for sample in prometheus(hosts[master], "query", query="llama_rpc_unit_active")["result"]}
            return found if found == expected else None
        units, _took = until(units_active, 30)
        assert units, prometheus(hosts[master], "query", query="llama_rpc_unit_active")["result"]
        caches = {sample["metric"]["node"]: float(sample["value"][1])
                  for sample in prometheus(hosts[master], "query", query="llama_rpc_tensor_cache_bytes")["result"]}
        assert set(caches) == set(nodes[1:]) and all(size > 0 for size in caches.values()), caches
        # (the load of a llama-server that an earlier test restarted is written once it has loaded: a figures' run later)
        wanted = {"llama_rpc_load_seconds", "llama_rpc_load_predicted_seconds"}

        def loads_there():
            found = prometheus(hosts[master], "query", query=" or ".join(sorted(wanted)))["result"]
            return found if {sample["metric"]["__name__"] for sample in found} == wanted else None
        loads, _took = until(loads_there, 30)
        assert loads, prometheus(hosts[master], "query", query="{__name__=~'llama_rpc_load.*'}")["result"]
        # llama-server's own, read with its key
        assert prometheus(hosts[master], "query", query="llamacpp:n_decode_total")["result"], "llama-server's metrics"
        # the last bench.yml's figures, where it ran (test_master.py's bench, before this file): one per run
        code, bench = containers.sh(hosts[master], "cat /etc/ansible/facts.d/llama_rpc_bench.fact")
        if code == 0:
            runs = {(str(run["workers"]), run["test"]): run["tokens_per_second"] for run in json.loads(bench)["runs"]}
            figures = {(sample["metric"]["workers"], sample["metric"]["test"]): float(sample["value"][1]) for sample in
                       prometheus(hosts[master], "query", query="llama_rpc_bench_tokens_per_second")["result"]}
            assert figures.keys() == runs.keys() and all(abs(figures[key] - runs[key]) < 1e-6 * runs[key] for key in runs), \
                (figures, runs)


WORKER_UNIT, WORKER_WATCHDOG = "llama-rpc-worker@main", "llama-rpc-worker-watchdog@main"
WATCHDOG_KILLS = ("has left a client's", "has accepted no connection")  # its two signs (llama-rpc-worker-watchdog.py)


def worker_kills(worker):
    """The lines in which the worker's watchdog says it kills the worker."""
    journal = containers.checked_sh(worker, f"journalctl -u {WORKER_WATCHDOG} --no-pager -o cat")
    return [line for line in journal.splitlines() if "Killing it" in line]


def serves_again(master, timeout=180):
    probe = llama_cpp.request_on_master(llama_cpp.container_server_url(master) + "/completion", KEY,
                                        {"prompt": "Hello", "n_predict": 1, "cache_prompt": False})
    return until(lambda: llama_cpp.answer(containers.run(master, probe)[1].decode())[0] == 200, timeout, step=2)[1]


def test_a_stopped_worker_raises_its_alert_within_the_rules_time_and_it_resolves(docker_hosts):
    _client, hosts = docker_hosts
    master, worker = hosts[PLAIN_MASTER], hosts[PLAIN_WORKER]

    def firing():
        return [alert for alert in prometheus(master, "alerts")["alerts"] if alert["state"] == "firing"
                and alert["labels"]["alertname"] == "LlamaRpcServiceDown" and alert["labels"]["node"] == PLAIN_WORKER]
    assert not firing()
    containers.checked_sh(worker, f"systemctl stop {WORKER_UNIT}")
    try:
        alerts, took = until(firing, 60)
        assert took is not None and alerts[0]["labels"]["unit"] == "llama-rpc-worker@main.service", alerts
        print(f"the alert fired {took:.1f} s after the worker's service stopped (the rule's path: {ALERT_BOUND} s)")
        assert took <= ALERT_BOUND + 5, (took, ALERT_BOUND)  # and the API's look, once a second
    finally:
        containers.checked_sh(worker, f"systemctl start {WORKER_UNIT}")
    _gone, took = until(lambda: not firing(), 60)
    assert took is not None, firing()
    print(f"resolved {took:.1f} s after it started again")
    # llama-server lost its worker: it serves again (restarted by systemd, it waits for its workers) before the next test
    assert serves_again(master) is not None, "llama-server does not serve completions again"


def test_a_frozen_worker_is_named_by_its_own_alert_and_restarted_by_its_watchdog(docker_hosts):
    """A worker's RPC process stopped (SIGSTOP: its unit stays active) and never let go, with a request sent to its
    cluster: the request's bytes sit unread on the worker, and then the restarted llama-server's connections wait in its
    queue. LlamaRpcWorkerNotAnswering names the worker within the rule's path (the worker watchdog's look, the bound,
    the figures, a scrape), while LlamaRpcServiceDown stays silent; the worker's own watchdog kills it (the alert's text
    says so) within its timeout, systemd starts it again, the alert resolves and the cluster serves, though nobody let
    the frozen process go."""
    _client, hosts = docker_hosts
    master, worker = hosts[PLAIN_MASTER], hosts[PLAIN_WORKER]

    def firing(name):
        return [alert for alert in prometheus(master, "alerts")["alerts"] if alert["state"] == "firing"
                and alert["labels"]["alertname"] == name and alert["labels"]["node"] == PLAIN_WORKER]
    assert not firing("LlamaRpcWorkerNotAnswering")
    bound = (int(SETTINGS["monitoring_alert_unanswered_seconds"]) + int(SETTINGS["rpc_worker_watchdog_interval"])
             + int(SETTINGS["monitoring_metrics_interval"]) + 2 * int(SETTINGS["monitoring_scrape_interval"]))
    completion = llama_cpp.request_on_master(llama_cpp.container_server_url(master) + "/completion", KEY,
                                             {"prompt": "Hello", "n_predict": 4, "cache_prompt": False})
    kills_before = len(worker_kills(worker))
    frozen_pid = containers.checked_sh(worker, f"systemctl show -p MainPID --value {WORKER_UNIT}")
    containers.checked_sh(worker, f"systemctl kill -s SIGSTOP {WORKER_UNIT}")
    try:
        containers.checked_sh(master, "systemd-run --unit frozen-worker-request " + shlex.join(completion))
        alerts, took = until(lambda: firing("LlamaRpcWorkerNotAnswering"), bound + 30)
        assert took is not None, prometheus(master, "query", query="llama_rpc_worker_unanswered_seconds")["result"]
        assert alerts[0]["labels"]["worker_instance"] == "main" and PLAIN_WORKER in alerts[0]["annotations"]["summary"], alerts
        assert "Its watchdog restarts it after rpc_worker_watchdog_timeout of this, with a client connected or none" in \
            alerts[0]["annotations"]["description"], alerts
        print(f"a frozen worker was named {took:.1f} s after it froze (the rule's path: {bound} s, and the restarts of "
              "llama-server its stall caused)")
        assert not firing("LlamaRpcServiceDown"), "the unit of a frozen worker is active: only its own alert is right"
        kills, took = until(lambda: worker_kills(worker)[kills_before:], 2 * int(SETTINGS["rpc_worker_watchdog_timeout"]) + 30)
        assert took is not None and any(sign in kills[0] for sign in WATCHDOG_KILLS), worker_kills(worker)[-3:]
        print(f"its watchdog killed it {took:.1f} s after the alert: {kills[0]}")
        assert containers.checked_sh(worker, f"systemctl show -p MainPID --value {WORKER_UNIT}") != frozen_pid
    finally:
        # a no-op once the watchdog has killed the frozen process; lets it go if the test failed before
        containers.sh(worker, f"systemctl kill -s SIGCONT {WORKER_UNIT}")
    _gone, took = until(lambda: not firing("LlamaRpcWorkerNotAnswering"), 60)
    assert took is not None, firing("LlamaRpcWorkerNotAnswering")
    print(f"resolved {took:.1f} s after the watchdog's kill")
    assert serves_again(master) is not None, "llama-server does not serve completions again"


def test_a_worker_frozen_with_no_client_connected_is_restarted_within_the_watchdogs_timeout(docker_hosts):
    """No connection open to the worker when it freezes (llama-server stopped), then llama-server started: its start
    waits for the workers, whose connections sit in the frozen worker's queue, unaccepted. Nothing holds unread bytes on
    an accepted connection: the watchdog's other sign (no connection accepted, the queue waiting, probes unanswered)
    kills it within its timeout, and the cluster serves."""
    _client, hosts = docker_hosts
    master, worker = hosts[PLAIN_MASTER], hosts[PLAIN_WORKER]
    timeout, interval = int(SETTINGS["rpc_worker_watchdog_timeout"]), int(SETTINGS["rpc_worker_watchdog_interval"])
    kills_before = len(worker_kills(worker))
    containers.checked_sh(master, "systemctl stop llama-server")
    containers.checked_sh(worker, f"systemctl kill -s SIGSTOP {WORKER_UNIT}")
    try:
        frozen_at = time.monotonic()
        containers.checked_sh(master, "systemctl start --no-block llama-server")
        kills, took = until(lambda: worker_kills(worker)[kills_before:], timeout + 60)
        assert took is not None, containers.checked_sh(worker, f"journalctl -u {WORKER_WATCHDOG} --no-pager -o cat -n 5")
        assert "has accepted no connection" in kills[0], kills
        # its look every interval, a probe's 3 s, the timeout, and the journal read (a second)
        assert took <= timeout + 2 * interval + 3 + 2, (took, kills)
        print(f"a worker frozen with no client was killed {took:.1f} s after llama-server started waiting for it "
              f"(timeout {timeout} s): {kills[0]}")
    finally:
        containers.sh(worker, f"systemctl kill -s SIGCONT {WORKER_UNIT}")
    took = serves_again(master)
    assert took is not None, "llama-server does not serve completions again"
    print(f"the cluster serves {time.monotonic() - frozen_at:.1f} s after the freeze")


def test_an_outsider_reaches_no_exporter_and_no_prometheus(docker_hosts):
    client, hosts = docker_hosts
    probe = ("import socket, sys\nfor target in sys.argv[1:]:\n    host, port = target.rsplit(':', 1)\n"
             "    try:\n        socket.create_connection((host, int(port)), 3).close(); print(target, 'open')\n"
             "    except socket.timeout:\n        print(target, 'timeout')\n    except OSError as error:\n"
             "        print(target, 'refused' if error.errno == 111 else error.errno)\n")
    targets = [f"{interface_address(hosts[node])}:9100" for nodes in CLUSTERS.values() for node in nodes]
    targets += [f"{interface_address(hosts[master])}:9090" for master in CLUSTERS]
    with Outsider(client, NETWORK) as outsider:
        answers = dict(line.split(" ", 1) for line in outsider.sh(
            "python3 -c " + shlex.quote(probe) + " " + " ".join(targets)).splitlines())
    assert all(answers[target] == "timeout" for target in targets if target.endswith(":9100")), answers
    assert all(answers[target] == "refused" for target in targets if target.endswith(":9090")), answers


def test_no_file_a_non_root_user_reads_holds_llama_servers_key(docker_hosts):
    _client, hosts = docker_hosts
    for master in CLUSTERS:
        found = containers.sh(hosts[master], "runuser -u nobody -- sh -c \"find /etc /var /srv /opt /usr/local /home /run /tmp "
                                             "-xdev -type f -size -2M -readable 2>/dev/null | xargs -r grep -lF -- "
                                             f"'{KEY}' 2>/dev/null\"")[1]
        assert found.strip() == "", found
        assert containers.checked_sh(hosts[master], f"stat -c '%U %G %a' /etc/prometheus/llama-server-keys/{master}.key") \
            == "root prometheus 640"


def test_a_speculating_cluster_writes_the_same_text_and_its_drafts_reach_prometheus_and_the_console(docker_hosts):
    """cluster_b speculates (draft-simple, a draft of its own model: molecule.yml), cluster_a does not: with greedy
    sampling their texts are the same. cluster_b's drafts reach its Prometheus and its console page (the mean
    acceptance length); cluster_a's has none."""
    _client, hosts = docker_hosts
    [speculating] = [master for master in CLUSTERS if master != PLAIN_MASTER]
    body = {"prompt": "Once upon a time", "n_predict": 48, "temperature": 0, "cache_prompt": False}
    texts = {}
    for master in (PLAIN_MASTER, speculating):
        command = llama_cpp.request_on_master(llama_cpp.container_server_url(hosts[master]) + "/completion", KEY, body)
        status, answer = llama_cpp.answer(containers.run(hosts[master], command)[1].decode())
        assert status == 200, answer
        texts[master] = json.loads(answer)["content"]
    assert texts[PLAIN_MASTER] and texts[speculating] == texts[PLAIN_MASTER], texts

    def drafted():  # each cluster's master runs its own Prometheus
        return prometheus(hosts[speculating], "query", query="llamacpp:spec_decode_num_drafts_total > 0")["result"] or None
    found, _took = until(drafted, 30)
    assert found and {sample["metric"]["cluster"] for sample in found} == {speculating}, found
    accepted = prometheus(hosts[speculating], "query", query="llamacpp:spec_decode_num_accepted_tokens_total")["result"]
    assert [float(sample["value"][1]) > 0 for sample in accepted] == [True], accepted
    plain = prometheus(hosts[PLAIN_MASTER], "query", query="llamacpp:spec_decode_num_drafts_total")["result"]
    assert plain and all(float(sample["value"][1]) == 0 for sample in plain), plain

    def console(master):
        page = containers.checked_sh(hosts[master], "python3 -c \"import urllib.request; print(urllib.request.urlopen("
                                                    "'http://127.0.0.1:9090/consoles/llama-rpc.html').read().decode())\"")
        return page.split("<h2>Speculative decoding", 1)[1]
    assert "no drafts checked yet" in console(PLAIN_MASTER)
    section = console(speculating)
    row = section.split(f"<tr><td>{speculating}</td>", 1)[1].split("</tr>", 1)[0]
    length = float(row.rsplit("<td>", 1)[1].split("<")[0])
    assert 1.0 < length <= 4.0, section  # tokens per step, at most rpc_master_spec_draft_max (3) + 1
