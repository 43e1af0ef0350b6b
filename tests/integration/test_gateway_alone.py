"""The gateway role alone, for a change to it (`make role ROLE=gateway`, minutes warm): HAProxy on a fresh systemd
host in front of the smallest cluster (conftest.py, small_cluster), deployed by playbooks/gateway.yml, which reads what
the master published. Through it the greedy tokens are the master's own and a streamed chat completion passes; only
TLS with a client key gets through, refused at the edge; the keys stay out of the configuration and the logs; a re-run
changes nothing; a request wakes a stopped cluster (its key only) and is answered, or gets 503 with Retry-After past
the bound. The cluster scenario checks the gateway in front of two clusters, requests spread over both, one of
them stopped and started again (make molecule SCENARIOS=cluster)."""

import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import docker
import pytest

from tests.integration.conftest import (SMALL_MASTER, SMALL_NETWORK, SMALL_SERVER_KEY, SMALL_WORKER, ROOT,
                                        small_cluster_inventory)
from tests.integration.test_rpc_master_alone import update
from tests.tools import containers, gateway_client, llama_cpp

GATEWAY = "llama-alone-gateway"
CLIENT_KEYS = ["alone-gateway-key", "alone-gateway-key-2"]  # test keys, not the master's; a real one is in Vault
GREEDY = {"prompt": "Once upon a time", "n_predict": 8, "temperature": 0, "cache_prompt": False}
WAKE_TIMEOUT = 25  # gateway_wake_timeout: the tiny model's cluster starts in a few seconds
sh = containers.sh


@pytest.fixture(scope="module")
def gateway(small_cluster, tmp_path_factory):
    """The gateway host, deployed: where it answers (its published state) and a TLS context that trusts it only."""
    hosts = small_cluster[0]
    client = docker.from_env()
    host = containers.start_host(client, GATEWAY, SMALL_NETWORK)
    try:
        inventory = small_cluster_inventory(tmp_path_factory.mktemp("gateway-inventory"), gateway=GATEWAY,
                                            gateway_api_keys=CLIENT_KEYS, gateway_wake_timeout=WAKE_TIMEOUT)
        first = containers.run_playbook(inventory, ROOT / "playbooks" / "gateway.yml", {})
        assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
        fact = json.loads(sh(host, "cat /etc/ansible/facts.d/llama_rpc_gateway.fact")[1])
        certificate = tmp_path_factory.mktemp("gateway") / "gateway.pem"
        certificate.write_text(sh(host, "cat /etc/llama-rpc-gateway/tls.pem")[1] + "\n")
        yield SimpleNamespace(host=host, master=hosts[SMALL_MASTER], worker=hosts[SMALL_WORKER], url=fact["url"],
                              cluster_directory=small_cluster[1],
                              inventory=inventory, out_within=int(fact["check"]["out_within"]),
                              output=first.stdout + first.stderr,
                              context=ssl.create_default_context(cafile=str(certificate)))
    finally:
        host.remove(force=True)


def call(gateway, path, body=None, key=CLIENT_KEYS[0], timeout=60):
    return gateway_client.call(gateway, path, body, key, timeout)


def test_through_the_gateway_the_tokens_are_the_masters_own(gateway):
    assert "TASK [graviton.llama_rpc.gateway : Read the masters' published state]" in gateway.output
    status, cluster, body = call(gateway, "/completion", GREEDY)
    assert status == 200 and cluster == SMALL_MASTER, (status, cluster, body)
    direct = urllib.request.Request(llama_cpp.container_server_url(gateway.master) + "/completion",
                                    data=json.dumps(GREEDY).encode(), headers={"Authorization": f"Bearer {SMALL_SERVER_KEY}"})
    with urllib.request.urlopen(direct, timeout=60) as reply:
        own = json.load(reply)["content"]
    assert own.strip() and json.loads(body)["content"] == own, (body, own)


def test_a_streamed_chat_completion_passes_through(gateway):
    request = urllib.request.Request(
        gateway.url + "/v1/chat/completions",
        data=json.dumps({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8, "stream": True}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {CLIENT_KEYS[0]}"})
    with urllib.request.urlopen(request, context=gateway.context, timeout=60) as reply:
        assert reply.headers.get_content_type() == "text/event-stream"
        events = [line for line in reply.read().decode().splitlines() if line.startswith("data: ")]
    assert len(events) >= 3 and events[-1] == "data: [DONE]", events


def test_only_tls_with_a_client_key_gets_through(gateway):
    for key in (None, "not-a-key", SMALL_SERVER_KEY):  # the master's own key is its, not a client's
        status, cluster, body = call(gateway, "/health", key=key)
        assert status == 401 and cluster is None and "Invalid API Key" in body, (key, status, body)  # at the edge
    for key in CLIENT_KEYS:
        assert call(gateway, "/health", key=key)[0] == 200
    answer = gateway_client.plain_http_answer(gateway.url, CLIENT_KEYS[0])  # plain HTTP gets no HTTP answer
    assert not answer.startswith(b"HTTP/"), answer
    # A client that does not trust the gateway's certificate is refused by its own TLS check.
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(gateway.url + "/health", context=ssl.create_default_context(), timeout=10)


def test_keys_stay_out_of_the_configuration_and_the_logs(gateway):
    keys = CLIENT_KEYS + [SMALL_SERVER_KEY]
    assert not any(key in sh(gateway.host, "cat /etc/llama-rpc-gateway/haproxy.cfg")[1] for key in keys)
    for secret in ("api-keys", "backend.env", "tls.pem.key"):
        assert sh(gateway.host, f"stat -c '%U %G %a' /etc/llama-rpc-gateway/{secret}")[1] == "root root 600", secret
    assert sh(gateway.host, "systemctl is-active llama-rpc-gateway")[1] == "active"
    journal = sh(gateway.host, "journalctl -u llama-rpc-gateway --no-pager -o cat")[1]
    assert not any(key in journal or key in gateway.output for key in keys)
    # It does log each request (so the check above has lines to look in): served by the cluster, or refused at the edge.
    lines = journal.splitlines()
    assert any(f" llama_servers/{SMALL_MASTER} " in line and " 200 " in line and '"POST /completion HTTP/1.1"' in line
               for line in lines), journal[-2000:]
    assert any(" llama_gateway/<NOSRV> " in line and " 401 " in line for line in lines), journal[-2000:]


def test_a_rerun_changes_nothing(gateway):
    again = containers.run_playbook(gateway.inventory, ROOT / "playbooks" / "gateway.yml", {})
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert containers.changed_per_host(again.stdout) == {GATEWAY: 0}, again.stdout[-4000:]


def gone_out(gateway, unit, host):
    """Stops a unit and waits until the gateway has taken the cluster out (its published bound, and a second)."""
    containers.checked_sh(host, f"systemctl stop {unit}")
    time.sleep(gateway.out_within + 1)


def test_a_request_wakes_a_stopped_cluster_with_a_client_key_only(gateway):
    """llama-server stopped (as the idle stop does): a request without a client key, or with a wrong one, gets 401 and
    starts nothing; one with a key starts it through the master's wake socket and gets the master's own tokens. Then
    the worker down too, so that llama-server waits for it: the request gets 503 with Retry-After at the bound, and
    the cluster serves once the worker is back."""
    master = gateway.master
    status, _cluster, body = call(gateway, "/completion", GREEDY)
    assert status == 200, body
    expected = json.loads(body)["content"]
    gone_out(gateway, "llama-server", master)
    for key in (None, "not-a-key"):
        assert call(gateway, "/completion", GREEDY, key=key)[0] == 401
    time.sleep(2)
    assert containers.sh(master, "systemctl is-active llama-server")[1] == "inactive", "a request without a key woke it"
    began = time.monotonic()
    status, cluster, body = call(gateway, "/completion", GREEDY, timeout=WAKE_TIMEOUT + 20)
    woke_in = time.monotonic() - began
    assert (status, cluster) == (200, SMALL_MASTER) and json.loads(body)["content"] == expected, (status, body, woke_in)
    print(f"the gateway woke the stopped cluster and answered in {woke_in:.1f} s (bound {WAKE_TIMEOUT} s)")
    wakes = containers.checked_sh(master, "journalctl -u 'llama-server-wake@*' --no-pager -o cat")
    assert "a wake from " in wakes and "starting llama-server.service" in wakes and SMALL_SERVER_KEY not in wakes, wakes
    journal = sh(gateway.host, "journalctl -u llama-rpc-gateway --no-pager -o cat")[1]
    assert "no cluster is up: woke " in journal and ": starting inactive" in journal, journal[-2000:]

    worker_unit = "llama-rpc-worker@main"
    containers.checked_sh(gateway.worker, f"systemctl stop {worker_unit}")
    try:
        gone_out(gateway, "llama-server", master)
        request = urllib.request.Request(gateway.url + "/completion", data=json.dumps(GREEDY).encode(),
                                         headers={"Authorization": f"Bearer {CLIENT_KEYS[0]}"})
        began = time.monotonic()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, context=gateway.context, timeout=WAKE_TIMEOUT + 20)
        waited = time.monotonic() - began
        assert refused.value.code == 503 and refused.value.headers["Retry-After"] == str(WAKE_TIMEOUT), refused.value.headers
        assert json.loads(refused.value.read())["error"]["message"].startswith("No cluster serves now"), waited
        assert WAKE_TIMEOUT - 1 <= waited <= WAKE_TIMEOUT + 5, waited
        # the wake started llama-server, which waits for its worker
        assert containers.sh(master, "systemctl is-active llama-server")[1] == "active"
    finally:
        containers.checked_sh(gateway.worker, f"systemctl start {worker_unit}")
    for _attempt in range(60):
        status, cluster, body = call(gateway, "/completion", GREEDY)
        if status == 200:
            break
        time.sleep(1)
    assert status == 200 and json.loads(body)["content"] == expected, body


def test_a_request_right_after_an_idle_stop_is_held_and_wakes_the_cluster(gateway):
    """The idle stop on the master behind the gateway (12 s, a look every 2 s): it tells the gateway first (its wake
    socket answers the gateway's agent check "down"), and stops llama-server once the gateway has heard. Requests 0.5,
    2 and 5 s after the stop find the cluster out, are held (the first wakes it) until llama-server answers /health,
    and get the master's own tokens: never HAProxy's bare 503, nor llama-server's "Loading model".
    Then the idle stop is turned off again."""
    master = gateway.master
    expected = json.loads(call(gateway, "/completion", GREEDY)[2])["content"]
    since = containers.checked_sh(master, "date +%s")
    deployed = update(gateway.cluster_directory, {"rpc_master_idle_stop_minutes": 0.2, "rpc_master_watchdog_interval": 2})
    assert deployed.returncode == 0, (deployed.stdout + deployed.stderr)[-3000:]
    try:
        began = time.monotonic()
        while containers.sh(master, "systemctl is-active llama-server")[1] == "active" and time.monotonic() - began < 90:
            time.sleep(0.5)
        stopped_at = time.monotonic()
        journal = containers.checked_sh(master, "journalctl -u llama-server-idle-stop --no-pager -o cat")
        assert containers.sh(master, "systemctl is-active llama-server")[1] == "inactive", journal
        assert "the stop announced to the gateways: heard" in journal, journal
        # the gateway took the cluster out on its agent's word before llama-server stopped (one clock: the host's)
        gateway_log = sh(gateway.host, f"journalctl -u llama-rpc-gateway --since @{since} --no-pager -o short-unix")[1]
        out = [float(line.split()[0]) for line in gateway_log.splitlines()
               if f"{SMALL_MASTER} is DOWN" in line and "via agent : down" in line]
        journal = sh(master, f"journalctl -u llama-server --since @{since} --no-pager -o short-unix")[1]
        stopping = [float(line.split()[0]) for line in journal.splitlines() if "Stopping " in line]
        assert out and stopping and out[0] <= stopping[-1], (out, stopping)
        # requests 0.5, 2 and 5 s after the stop: the first wakes the cluster, the others come while it starts and loads
        answers = {}

        def ask(after):
            time.sleep(max(0.0, after - (time.monotonic() - stopped_at)))
            answers[after] = call(gateway, "/completion", GREEDY, timeout=WAKE_TIMEOUT + 20) + (time.monotonic() - stopped_at,)
        askers = [threading.Thread(target=ask, args=(after,)) for after in (0.5, 2, 5)]
        for asker in askers:
            asker.start()
        for asker in askers:
            asker.join()
        for after, (status, cluster, body, answered) in sorted(answers.items()):
            # held until llama-server answers /health, never passed to it while it loads (no "Loading model" 503)
            assert (status, cluster) == (200, SMALL_MASTER) and json.loads(body)["content"] == expected, (after, status, body)
            print(f"a request {after} s after the idle stop was held and answered {answered:.1f} s after the stop")
    finally:
        restored = update(gateway.cluster_directory, {})
    assert restored.returncode == 0, (restored.stdout + restored.stderr)[-3000:]
    assert containers.sh(master, "systemctl cat llama-server-idle-stop")[0] != 0, "the idle stop was not removed"
