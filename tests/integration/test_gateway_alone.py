"""The gateway role alone, for a change to it (`make role ROLE=gateway`, minutes warm): HAProxy on a fresh systemd
host in front of the smallest cluster (conftest.py, small_cluster), deployed by playbooks/gateway.yml, which reads what
the master published. Through it the greedy tokens are the master's own; only TLS with a client key gets through; the
keys stay out of the configuration and the logs; a re-run changes nothing. The cluster scenario checks the gateway in
front of two clusters, one of them stopped and started again (make molecule SCENARIOS=cluster)."""

import json
import socket
import ssl
import urllib.error
import urllib.request
from types import SimpleNamespace

import docker
import pytest

from tests.integration.conftest import SMALL_MASTER, SMALL_NETWORK, SMALL_SERVER_KEY, ROOT, server_url, small_cluster_inventory
from tests.tools import containers

GATEWAY = "llama-alone-gateway"
CLIENT_KEYS = ["alone-gateway-key", "alone-gateway-key-2"]  # test keys, not the master's; a real one is in Vault
GREEDY = {"prompt": "Once upon a time", "n_predict": 8, "temperature": 0, "cache_prompt": False}
sh = containers.sh


@pytest.fixture(scope="module")
def gateway(small_cluster, tmp_path_factory):
    """The gateway host, deployed: where it answers (its published state) and a TLS context that trusts it only."""
    hosts = small_cluster[0]
    client = docker.from_env()
    host = containers.start_host(client, GATEWAY, SMALL_NETWORK)
    try:
        inventory = small_cluster_inventory(tmp_path_factory.mktemp("gateway-inventory"), gateway=GATEWAY,
                                            gateway_api_keys=CLIENT_KEYS)
        first = containers.run_playbook(inventory, ROOT / "playbooks" / "gateway.yml", {})
        assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
        fact = json.loads(sh(host, "cat /etc/ansible/facts.d/llama_rpc_gateway.fact")[1])
        certificate = tmp_path_factory.mktemp("gateway") / "gateway.pem"
        certificate.write_text(sh(host, "cat /etc/llama-rpc-gateway/tls.pem")[1] + "\n")
        yield SimpleNamespace(host=host, master=hosts[SMALL_MASTER], url=fact["url"], inventory=inventory,
                              output=first.stdout + first.stderr,
                              context=ssl.create_default_context(cafile=str(certificate)))
    finally:
        host.remove(force=True)


def call(gateway, path, body=None, key=CLIENT_KEYS[0]):
    """One request through the gateway from this machine: (status, body); status 0 when no HTTP reply came."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(gateway.url + path, data=None if body is None else json.dumps(body).encode(),
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, context=gateway.context, timeout=60) as reply:
            return reply.status, reply.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8", "replace")


def test_through_the_gateway_the_tokens_are_the_masters_own(gateway):
    status, body = call(gateway, "/completion", GREEDY)
    assert status == 200, body
    direct = urllib.request.Request(server_url(gateway.master) + "/completion",
                                    data=json.dumps(GREEDY).encode(), headers={"Authorization": f"Bearer {SMALL_SERVER_KEY}"})
    with urllib.request.urlopen(direct, timeout=60) as reply:
        own = json.load(reply)["content"]
    assert own.strip() and json.loads(body)["content"] == own, (body, own)


def test_only_tls_with_a_client_key_gets_through(gateway):
    for key in (None, "not-a-key", SMALL_SERVER_KEY):  # the master's own key is its, not a client's
        status, body = call(gateway, "/health", key=key)
        assert status == 401 and "Invalid API Key" in body, (key, status, body)
    for key in CLIENT_KEYS:
        assert call(gateway, "/health", key=key)[0] == 200
    host, port = gateway.url.removeprefix("https://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as plain:  # plain HTTP gets no HTTP answer
        plain.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {CLIENT_KEYS[0]}\r\n\r\n".encode())
        try:
            answer = plain.recv(1024)
        except ConnectionResetError:
            answer = b""
    assert not answer.startswith(b"HTTP/"), answer
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(gateway.url + "/health", context=ssl.create_default_context(), timeout=10)


def test_keys_stay_out_of_the_configuration_and_the_logs(gateway):
    keys = CLIENT_KEYS + [SMALL_SERVER_KEY]
    assert not any(key in sh(gateway.host, "cat /etc/llama-rpc-gateway/haproxy.cfg")[1] for key in keys)
    for secret in ("api-keys", "backend.env", "tls.pem.key"):
        assert sh(gateway.host, f"stat -c '%U %G %a' /etc/llama-rpc-gateway/{secret}")[1] == "root root 600", secret
    journal = sh(gateway.host, "journalctl -u llama-rpc-gateway --no-pager -o cat")[1]
    assert f" llama_servers/{SMALL_MASTER} " in journal  # it logs each request: the check above has lines to look in
    assert not any(key in journal or key in gateway.output for key in keys)


def test_a_rerun_changes_nothing(gateway):
    again = containers.run_playbook(gateway.inventory, ROOT / "playbooks" / "gateway.yml", {})
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert containers.changed_per_host(again.stdout) == {GATEWAY: 0}, again.stdout[-4000:]
