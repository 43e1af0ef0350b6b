"""The rpc_worker role alone, for a change to it (`make role ROLE=rpc_worker`, about 2 minutes warm): deployed by
ansible-playbook onto a fresh systemd host with the RPC worker llama_build built for it (the controller's kept build,
copied in with its OpenMP runtime), beside a master host that nothing is deployed on. The worker runs unprivileged
and sandboxed, listens on its private address only, admits its master and drops anyone else, answers llama.cpp's
protocol, and a re-run changes nothing. The cluster scenario checks the same role among the others (make molecule SCENARIOS=cluster)."""

import json
import socket
from pathlib import Path

import docker
import pytest

from tests.tools import containers, llama_cpp

PLAYBOOK = Path(__file__).resolve().parents[1] / "playbooks" / "rpc_worker.yml"
NETWORK = "llama-rpc-worker-alone"
MASTER, WORKER = "llama-worker-alone-master", "llama-worker-alone-worker"
BINARY = "/opt/llama.cpp/current/bin/ggml-rpc-server"
UNIT = "llama-rpc-worker@main.service"
PORT = 50052
# llama.cpp's HELLO, sent from the master host; the answer begins with the worker's protocol version, three bytes
HELLO = "import socket; s = socket.create_connection(('{address}', {port}), timeout=5); " \
        f"s.sendall(bytes.fromhex('{llama_cpp.RPC_HELLO.hex()}')); s.recv(8); print('.'.join(map(str, s.recv(3))))"
sh = containers.sh


def address(container):
    container.reload()
    return container.attrs["NetworkSettings"]["Networks"][NETWORK]["IPAddress"]


@pytest.fixture(scope="module")
def deployed(x86_build, tmp_path_factory):
    """Both hosts, the worker program in place, and the first ansible-playbook run (rpc_worker on the worker only)."""
    client = docker.from_env()
    # NET_ADMIN: the role installs the worker's nftables table
    hosts = {name: containers.start_host(client, name, NETWORK, extra_caps=["NET_ADMIN"]) for name in (MASTER, WORKER)}
    try:
        worker = hosts[WORKER]
        sh(worker, f"mkdir -p {Path(BINARY).parent}")
        worker.put_archive(str(Path(BINARY).parent), containers.tar_of(x86_build / "ggml-rpc-server"))
        # and its runtime library, which llama_build installs with it (OpenMP)
        installed = sh(worker, "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libgomp1")
        assert installed[0] == 0, installed[1][-2000:]
        inventory = tmp_path_factory.mktemp("worker-alone") / "hosts.yml"
        inventory.write_text(json.dumps({
            "llama_master": {"hosts": {MASTER: {"ansible_connection": "community.docker.docker"}}},
            "llama_workers": {"hosts": {WORKER: {"ansible_connection": "community.docker.docker"}}}}))
        extra = {"rpc_worker_binary": BINARY, "rpc_worker_port": PORT, "rpc_worker_allowed_sources": [address(hosts[MASTER])]}
        first = containers.run_playbook(inventory, PLAYBOOK, extra, limit=WORKER)
        assert first.returncode == 0, (first.stdout + first.stderr)[-3000:] + sh(worker, f"journalctl -u {UNIT} -n 30")[1]
        yield hosts, inventory, extra
    finally:
        containers.remove(client, hosts.values(), NETWORK)


def test_the_worker_runs_unprivileged_and_sandboxed(deployed):
    worker = deployed[0][WORKER]
    assert sh(worker, f"systemctl is-enabled {UNIT} && systemctl is-active {UNIT}")[0] == 0
    pid = sh(worker, f"systemctl show -p MainPID --value {UNIT}")[1]
    assert sh(worker, f"ps -o user= -p {pid}")[1] == "llama-rpc"
    out = sh(worker, f"systemd-analyze security {UNIT} --no-pager")[1]
    assert containers.security_exposure(out) <= 2.0, out[-2000:]
    cache = sh(worker, "stat -c '%U %a' /var/cache/llama-rpc-worker/main")[1]
    assert cache == "llama-rpc 700"


def test_it_listens_on_its_private_address_only(deployed):
    worker = deployed[0][WORKER]
    listeners = sh(worker, f"ss -Hltn 'sport = :{PORT}'")[1]
    assert f"{address(worker)}:{PORT}" in listeners, listeners
    assert f"0.0.0.0:{PORT}" not in listeners and f"*:{PORT}" not in listeners


def test_its_master_gets_llama_cpps_answer_and_anyone_else_is_dropped(deployed):
    hosts = deployed[0]
    worker_address = address(hosts[WORKER])
    # the master, the one source admitted: HELLO is answered with the protocol of the pinned source
    code, answer = sh(hosts[MASTER], "python3 -c \"%s\"" % HELLO.format(address=worker_address, port=PORT))
    assert code == 0 and answer == llama_cpp.protocol_version(), answer
    # this machine, on the same network but not the master: dropped by the worker's nftables table
    with pytest.raises(OSError):
        with socket.create_connection((worker_address, PORT), timeout=3) as outsider:
            outsider.sendall(llama_cpp.RPC_HELLO)
            if not outsider.recv(8):
                raise ConnectionResetError("closed without an answer")
    rules = sh(hosts[WORKER], "nft list table inet llama_rpc_worker")[1]
    assert address(hosts[MASTER]) in rules and "drop" in rules


def test_a_second_run_changes_nothing(deployed):
    _hosts, inventory, extra = deployed
    again = containers.run_playbook(inventory, PLAYBOOK, extra, limit=WORKER)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert containers.changed_per_host(again.stdout) == {WORKER: 0}, again.stdout[-4000:]
