"""The rpc_tunnel role's life on three real systemd hosts (a master and two workers; wireguard-go, since this machine's
kernel has no WireGuard): the tunnel joins the master with each worker and no worker with another, no private key
leaves its host, removing and adding a worker updates the master's peers without moving anyone, a key is rotated by
one variable, and the tunnel turned off leaves nothing behind. That a re-run changes nothing is the cluster scenario's
idempotence step (cluster_b is on the tunnel).

The tests run in order and build on each other (one cluster)."""

import json
from pathlib import Path

import docker
import pytest

from tests.tools import containers

PLAYBOOK = Path(__file__).resolve().parents[1] / "playbooks" / "rpc_tunnel.yml"
NETWORK = "llama-rpc-tunnel-test"
MASTER, WORKERS = "llama-tunnel-master", ["llama-tunnel-worker-1", "llama-tunnel-worker-2"]
ON = {"rpc_tunnel_enabled": True}
INTERFACE = "llama-rpc"
FACT = "/etc/ansible/facts.d/llama_rpc_tunnel.fact"
# Answers a TCP connection on the master's tunnel address with the address it came from.
ECHO_PORT = 7000
ECHO = ("import socket\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('{address}', %d)); s.listen(4)\n"
        "while True:\n"
        "    c, peer = s.accept(); c.sendall(peer[0].encode()); c.close()\n" % ECHO_PORT)
CONNECT = ("import socket\n"
           "try:\n"
           "    print(socket.create_connection(('{address}', %d), timeout={timeout}).recv(64).decode())\n"
           "except OSError as error:\n"
           "    print(type(error).__name__, error.errno)\n" % ECHO_PORT)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    client = docker.from_env()
    hosts = {name: containers.start_host(client, name, NETWORK, extra_caps=["NET_ADMIN"], devices=[containers.TUN])
             for name in [MASTER, *WORKERS]}
    try:
        # WireGuard's packages come first, with apt-get: the role then finds them and runs no apt. The role installing them
        # is proven in the cluster scenario (cluster_b); Ansible's apt module takes about 40 s a host on a fresh container
        # (python-apt builds its cache), apt-get 3 s.
        for host in hosts.values():
            containers.checked_sh(host, "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
                                        "--no-install-recommends wireguard-tools wireguard-go")
        yield hosts, tmp_path_factory.mktemp("tunnel")
    finally:
        containers.remove(client, hosts.values(), NETWORK)


def inventory(directory, workers=tuple(WORKERS), host_vars=None):
    """The cluster's inventory: the master, the given workers, host variables per host."""
    def hosts(names):
        return {name: dict({"ansible_connection": "community.docker.docker"}, **(host_vars or {}).get(name, {}))
                for name in names}
    path = Path(directory) / "hosts.yml"
    path.write_text(json.dumps({"llama_master": {"hosts": hosts([MASTER])}, "llama_workers": {"hosts": hosts(workers)}}))
    return path


def converge(directory, extra_vars=None, verbose=False, **layout):
    run = containers.run_playbook(inventory(directory, **layout), PLAYBOOK, dict(ON, **(extra_vars or {})), verbose=verbose)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    return run


sh = containers.sh


def wg(host, what):
    return sh(host, f"wg show {INTERFACE} {what}")[1].split()


def published(host):
    return json.loads(sh(host, f"cat {FACT}")[1])


def connect(host, address, timeout=12):
    """What host gets from the echo on address: its own address as the master saw it, or the error.

    The default waits through two of WireGuard's handshake retries (REKEY_TIMEOUT, 5 s): a first handshake lost or
    crossed with the peer's own is retried only then, and a 5-s wait once timed out in CI on the first connection."""
    return sh(host, f"python3 -c \"{CONNECT.format(address=address, timeout=timeout)}\"")[1]


def test_the_tunnel_joins_the_master_with_each_worker_and_no_worker_with_another(cluster):
    hosts, directory = cluster
    run = converge(directory, verbose=True)
    master, workers = hosts[MASTER], [hosts[name] for name in WORKERS]
    states = {name: published(host) for name, host in hosts.items()}
    assert [states[name]["address"] for name in [MASTER, *WORKERS]] == ["10.213.0.1", "10.213.0.2", "10.213.0.3"]
    assert {state["implementation"] for state in states.values()} == {"userspace"}  # this kernel has no WireGuard
    keys = {name: wg(host, "public-key")[0] for name, host in hosts.items()}
    assert sorted(wg(master, "peers")) == sorted(keys[name] for name in WORKERS)
    for name, worker in zip(WORKERS, workers):
        assert wg(worker, "peers") == [keys[MASTER]]
        assert states[name]["peers"] == [{"host": MASTER, "public_key": keys[MASTER], "address": "10.213.0.1"}]
    master.exec_run(["python3", "-c", ECHO.format(address="10.213.0.1")], detach=True)
    sh(master, f"for i in $(seq 50); do ss -Hltn 'sport = :{ECHO_PORT}' | grep -q . && break; sleep 0.1; done")
    for name, worker in zip(WORKERS, workers):
        assert connect(worker, "10.213.0.1") == states[name]["address"], f"{name} does not reach the master through the tunnel"
    # A worker's only peer is its master: the other worker's tunnel address has no key to go to (the kernel's
    # WireGuard says so, ENOKEY; wireguard-go drops the packet).
    assert connect(workers[0], "10.213.0.3", timeout=2) in ("OSError 126", "TimeoutError None")
    # No private key leaves its host: not in the run's output (-v: every task's result), the published state, the
    # tunnel's other files or its journal; the key file is root's alone.
    for name, host in hosts.items():
        private = sh(host, "cat /etc/llama-rpc-tunnel/private.key")[1]
        assert len(private) == 44 and private not in run.stdout + run.stderr
        assert private not in json.dumps(states[name])
        assert private not in sh(host, "cat /etc/llama-rpc-tunnel/peers.conf /etc/llama-rpc-tunnel/tunnel.env")[1]
        assert private not in sh(host, "journalctl -u llama-rpc-tunnel --no-pager")[1]
        assert sh(host, "stat -c '%U %a' /etc/llama-rpc-tunnel/private.key /etc/llama-rpc-tunnel")[1].split() == [
            "root", "600", "root", "700"]


def test_removing_a_worker_removes_it_from_the_masters_peers_and_moves_no_one(cluster):
    hosts, directory = cluster
    kept = wg(hosts[WORKERS[0]], "public-key")
    converge(directory, workers=WORKERS[:1])
    assert wg(hosts[MASTER], "peers") == kept
    assert published(hosts[WORKERS[0]])["address"] == "10.213.0.2"
    assert connect(hosts[WORKERS[0]], "10.213.0.1") == "10.213.0.2"


def test_adding_a_worker_adds_it_to_the_masters_peers_at_its_own_address(cluster):
    hosts, directory = cluster
    converge(directory)
    assert sorted(wg(hosts[MASTER], "peers")) == sorted(wg(hosts[name], "public-key")[0] for name in WORKERS)
    assert published(hosts[WORKERS[1]])["address"] == "10.213.0.3"
    assert connect(hosts[WORKERS[1]], "10.213.0.1") == "10.213.0.3"


def test_a_key_is_rotated_by_one_variable_and_a_rerun(cluster):
    hosts, directory = cluster
    worker = hosts[WORKERS[0]]
    old = wg(worker, "public-key")[0]
    rotated = {WORKERS[0]: {"rpc_tunnel_key_generation": 2}}
    run = converge(directory, host_vars=rotated)
    new = wg(worker, "public-key")[0]
    assert new != old and new in wg(hosts[MASTER], "peers") and old not in wg(hosts[MASTER], "peers")
    assert wg(hosts[WORKERS[1]], "public-key")[0] in wg(hosts[MASTER], "peers")  # the other worker's key is unchanged
    assert connect(worker, "10.213.0.1") == "10.213.0.2"
    changed = containers.changed_per_host(run.stdout)
    assert changed[WORKERS[1]] == 0 and changed[WORKERS[0]] > 0 and changed[MASTER] > 0, changed
    again = converge(directory, host_vars=rotated)
    assert set(containers.changed_per_host(again.stdout).values()) == {0}, again.stdout[-3000:]


def test_turned_off_it_leaves_nothing_behind(cluster):
    hosts, directory = cluster
    converge(directory, extra_vars={"rpc_tunnel_enabled": False})
    for name, host in hosts.items():
        assert sh(host, f"ip link show {INTERFACE}")[0] != 0, f"{name} still has the interface"
        assert sh(host, "ls /etc/llama-rpc-tunnel /etc/systemd/system/llama-rpc-tunnel.service " + FACT)[0] != 0
        assert sh(host, "pgrep wireguard-go")[0] != 0
