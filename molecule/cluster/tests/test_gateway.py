"""The gateway (HAProxy, role gateway) in front of the scenario's two clusters (molecule.yml): requests spread over
both and either gives the same greedy tokens, and both are logged without a key; a stopped cluster is taken out within
the documented health bound, no request fails after it, and it gets requests again once it serves. The gateway's own
checks (TLS and client keys only, refusals at the edge, secrets, a streamed completion, a re-run of gateway.yml that
reads what a master published) run on the smallest cluster (tests/integration/test_gateway_alone.py)."""

import json
import os
import ssl
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import testinfra.utils.ansible_runner

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
sys.path.insert(0, str(ROOT))
from tests.tools import gateway_client  # noqa: E402  pylint: disable=wrong-import-position

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
testinfra_hosts = RUNNER.get_hosts("llama_gateway")
MASTERS = RUNNER.get_hosts("llama_master")  # one per cluster
STOPPED_MASTER = RUNNER.get_hosts("cluster_b_master")[0]
[SERVING_MASTER] = [master for master in MASTERS if master != STOPPED_MASTER]
CLIENT_KEYS = RUNNER.get_variables(testinfra_hosts[0])["gateway_api_keys"]
SERVER_KEY = RUNNER.get_variables(MASTERS[0])["rpc_master_server_api_key"]
GREEDY = {"prompt": "Once upon a time", "n_predict": 8, "temperature": 0, "cache_prompt": False}


@pytest.fixture(scope="module", name="gateway")
def fixture_gateway(tmp_path_factory):
    """Where the gateway answers (its published state) and a TLS context that trusts its certificate only."""
    host = RUNNER.get_host(testinfra_hosts[0])
    fact = json.loads(host.file("/etc/ansible/facts.d/llama_rpc_gateway.fact").content_string)
    certificate = tmp_path_factory.mktemp("gateway") / "gateway.pem"
    certificate.write_text(host.file("/etc/llama-rpc-gateway/tls.pem").content_string)
    return SimpleNamespace(host=host, url=fact["url"], check=fact["check"],
                           context=ssl.create_default_context(cafile=str(certificate)))


def call(gateway, path, body=None, key=CLIENT_KEYS[0], timeout=60):
    return gateway_client.call(gateway, path, body, key, timeout)


def test_requests_spread_over_both_clusters_with_the_same_greedy_tokens(gateway):
    replies = [call(gateway, "/completion", GREEDY) for _attempt in range(8)]
    assert all(status == 200 for status, _cluster, _body in replies), replies
    served = [cluster for _status, cluster, _body in replies]
    assert set(served) == set(MASTERS), served
    # Cluster a splits the model over two workers, cluster b over one: greedy decoding gives the same tokens.
    texts = {json.loads(body)["content"] for _status, _cluster, body in replies}
    assert len(texts) == 1 and texts.pop().strip(), replies
    print(f"served by: {served}")


def test_both_clusters_requests_are_logged_without_a_key(gateway):
    journal = gateway.host.check_output("journalctl -u llama-rpc-gateway --no-pager -o cat")
    assert not any(key in journal for key in CLIENT_KEYS + [SERVER_KEY])
    lines = journal.splitlines()  # it logs each request, so the check above has lines to look in
    for master in MASTERS:
        assert any(f" llama_servers/{master} " in line and ' 200 ' in line and '"POST /completion HTTP/1.1"' in line
                   for line in lines), (master, journal[-2000:])


def test_a_stopped_cluster_is_taken_out_within_the_bound_and_back_when_it_serves(gateway):
    bound = gateway.check["out_within"]  # the role's documented bound, which it publishes
    stopped = RUNNER.get_host(STOPPED_MASTER)
    failures, calls, stop_background = [], [], threading.Event()

    def keep_calling():  # a client that never stops while the cluster goes away
        while not stop_background.is_set():
            status, cluster, body = call(gateway, "/completion", GREEDY)
            calls.append((time.monotonic(), status, cluster))
            if status != 200:
                failures.append((time.monotonic(), status, body[:200]))

    background = threading.Thread(target=keep_calling, daemon=True)
    background.start()
    try:
        stop_issued_epoch = time.time()  # the containers share this machine's clock; HAProxy may see it go first
        stopped.check_output("systemctl stop llama-server-watchdog llama-server")
        stopped_at = time.monotonic()
        time.sleep(bound + 1)
        after_bound = [call(gateway, "/completion", GREEDY) for _attempt in range(6)]
        stopped.check_output("systemctl start llama-server llama-server-watchdog")
        started_at = time.monotonic()
        back_after = None
        while time.monotonic() - started_at < 300:
            if call(gateway, "/completion", GREEDY)[1] == STOPPED_MASTER:
                back_after = time.monotonic() - started_at
                break
            time.sleep(1)
    finally:
        stop_background.set()
        background.join(timeout=90)
        stopped.run("systemctl start llama-server llama-server-watchdog")
    assert [(status, cluster) for status, cluster, _body in after_bound] == [(200, SERVING_MASTER)] * 6, after_bound
    late = [failure for failure in failures if failure[0] > stopped_at + bound]
    assert not late, f"requests failed after the {bound} s bound: {late}"
    assert back_after is not None, f"{STOPPED_MASTER} got no request within 300 s of starting again"
    # When HAProxy took the cluster out, from its own journal.
    journal = gateway.host.check_output(f"journalctl -u llama-rpc-gateway --since @{int(stop_issued_epoch)} -o short-unix --no-pager")
    down = [float(line.split()[0]) for line in journal.splitlines() if f"llama_servers/{STOPPED_MASTER} is DOWN" in line]
    assert down, journal[-2000:]
    taken_out_after = down[0] - stop_issued_epoch
    assert 0 <= taken_out_after <= bound, taken_out_after
    during = [entry for entry in calls if stopped_at <= entry[0] <= stopped_at + bound]
    print(f"taken out after {taken_out_after:.1f} s (bound {bound} s); {len(during)} requests in the bound, {len(failures)} "
          f"failed; back {back_after:.1f} s after its start")
