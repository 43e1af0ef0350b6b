"""The WireGuard tunnel (role rpc_tunnel) on cluster_b, beside cluster_a without it (molecule.yml): RPC runs inside the
tunnel only; an outsider on the same network that takes the master's IP address gets into cluster_a's worker but not
into cluster_b's, whose master serves completions as before; a model load through the tunnel carries none of the
model's bytes in clear, where cluster_a's does; and no private key leaves its host.

What a test reads or does on another host than the one under test, and the outsider's attack, go through docker;
the capture is made on this machine, at the host side of the worker's network interface."""

import json
import os
import random
import re
import sys
import time
from pathlib import Path

import docker
import pytest
import testinfra.utils.ansible_runner

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
sys.path.insert(0, str(ROOT))
from tests.tools import collection, containers, llama_cpp, packet_capture  # noqa: E402  pylint: disable=wrong-import-position
from tests.tools.outsider import Outsider, interface_address  # noqa: E402  pylint: disable=wrong-import-position

collection.importable()
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import gguf  # noqa: E402  pylint: disable=wrong-import-position

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
[TUNNEL_MASTER] = RUNNER.get_hosts("cluster_b_master")
[TUNNEL_WORKER] = RUNNER.get_hosts("cluster_b_workers")
[PLAIN_MASTER] = RUNNER.get_hosts("cluster_a_master")
PLAIN_WORKER = RUNNER.get_hosts("cluster_a_workers")[0]
testinfra_hosts = [TUNNEL_MASTER, TUNNEL_WORKER]
NETWORK = "llama-rpc-master"  # the scenario's one network (molecule.yml)
PORT = RUNNER.get_variables(TUNNEL_WORKER)["rpc_worker_port"]
KEY = RUNNER.get_variables(TUNNEL_MASTER)["rpc_master_server_api_key"]
MODEL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "tiny.gguf"
FACT = "/etc/ansible/facts.d/llama_rpc_tunnel.fact"
PRIVATE_KEY = "/etc/llama-rpc-tunnel/private.key"


@pytest.fixture(scope="module", name="docker_hosts")
def fixture_docker_hosts():
    client = docker.from_env()
    return client, {name: client.containers.get(name) for name in (TUNNEL_MASTER, TUNNEL_WORKER, PLAIN_MASTER, PLAIN_WORKER)}


sh = containers.checked_sh


def published(container):
    return json.loads(sh(container, f"cat {FACT}"))


def greedy(master, timeout=180):
    """The master's llama-server's greedy tokens, once it serves (it may be loading its model)."""
    deadline = time.monotonic() + timeout
    command = llama_cpp.request_on_master(llama_cpp.container_server_url(master) + "/completion", KEY,
                                          {"prompt": "Once upon a time", "n_predict": 8, "temperature": 0})
    while True:
        status, body = llama_cpp.answer(master.exec_run(command).output.decode())
        if status == 200:
            return json.loads(body)["content"]
        assert time.monotonic() < deadline, f"{master.name}'s llama-server does not serve: {body[:300]}"
        time.sleep(1)


def drops(worker):
    """Packets the worker's firewall dropped on the RPC port (its rule's counter)."""
    rules = sh(worker, "nft list table inet llama_rpc_worker")
    return int(re.search(r"counter packets (\d+) bytes \d+ drop", rules).group(1))


def test_cluster_b_runs_rpc_inside_the_tunnel(host):
    """The worker listens on its tunnel address only, the master's worker list and llama-server use that address, the
    worker's firewall admits the master's tunnel address on the tunnel only, and its tensor cache was staged through
    it; wireguard-go carries it (this machine's kernel has no WireGuard). cluster_a has no tunnel."""
    state = json.loads(host.file(FACT).content_string)
    assert (state["interface"], state["network"], state["implementation"]) == ("llama-rpc", "10.213.0.0/24", "userspace")
    assert host.interface("llama-rpc").addresses == [state["address"]]
    worker = json.loads(RUNNER.get_host(TUNNEL_WORKER).file(FACT).content_string)
    master = json.loads(RUNNER.get_host(TUNNEL_MASTER).file(FACT).content_string)
    if host.backend.get_hostname() == TUNNEL_WORKER:
        listeners = host.check_output(f"ss -Hltn 'sport = :{PORT}'")
        assert listeners.split()[3] == f"{worker['address']}:{PORT}" and len(listeners.splitlines()) == 1, listeners
        rules = host.check_output("nft list table inet llama_rpc_worker")
        assert f'iifname "llama-rpc" ip saddr {master["address"]} accept' in rules, rules
        assert worker["peers"] == [{"host": TUNNEL_MASTER, "address": master["address"], "public_key": master["public_key"]}]
        # rpc_master staged the model's big tensors into this cache before the first load, through the tunnel
        assert int(host.check_output("find /var/cache/llama-rpc-worker/main/rpc -maxdepth 1 -type f | wc -l")) > 0
    else:
        assert host.file("/etc/llama-rpc/workers").content_string.strip() == f"{worker['address']}:{PORT}"
        assert f"LLAMA_ARG_RPC={worker['address']}:{PORT}" in host.file("/etc/llama-rpc/server.env").content_string
        assert [peer["public_key"] for peer in master["peers"]] == [worker["public_key"]]
        assert f"peer: {worker['public_key']}" in host.check_output("wg show llama-rpc")
        # wireguard-go and the tools, and not what wireguard-tools recommends: a kernel image that nothing boots
        assert host.package("wireguard-go").is_installed
        listed = host.run("dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n' 'linux-image-*' initramfs-tools").stdout
        assert not [line for line in listed.splitlines() if line.startswith("ii")], listed
    plain = RUNNER.get_host(PLAIN_WORKER)
    assert not plain.file(FACT).exists and not plain.interface("llama-rpc").exists


def test_an_outsider_with_the_masters_address_gets_into_a_plain_worker_but_not_through_the_tunnel(docker_hosts):
    """The same outsider takes each master's address (ARP spoofing its worker, so the worker's answers come to it):
    cluster_a's worker admits it and answers the RPC protocol; cluster_b's worker drops everything it sends, to the
    worker's address or its tunnel address (the outsider takes the master's tunnel address too), and cluster_b's master
    serves the same tokens after as before."""
    client, hosts = docker_hosts
    plain_master, plain_worker = hosts[PLAIN_MASTER], hosts[PLAIN_WORKER]
    tunnel_master, tunnel_worker = hosts[TUNNEL_MASTER], hosts[TUNNEL_WORKER]
    tunnel = {name: published(hosts[name]) for name in (TUNNEL_MASTER, TUNNEL_WORKER)}
    before = greedy(tunnel_master)
    with Outsider(client, NETWORK) as outsider:
        # llama-server holds the worker (one client at a time): stopped, so that the worker answers whoever gets in.
        sh(plain_master, "systemctl stop llama-server")
        try:
            with outsider.taking(interface_address(plain_master), plain_worker):
                plain = outsider.hello(interface_address(plain_worker), PORT, source=interface_address(plain_master))
        finally:
            sh(plain_master, "systemctl start llama-server")
        dropped_before = drops(tunnel_worker)
        master_tunnel_address, worker_tunnel_address = tunnel[TUNNEL_MASTER]["address"], tunnel[TUNNEL_WORKER]["address"]
        with outsider.taking(interface_address(tunnel_master), tunnel_worker,
                             also=[(master_tunnel_address, tunnel[TUNNEL_WORKER]["network"])]):
            direct = outsider.hello(interface_address(tunnel_worker), PORT, source=interface_address(tunnel_master))
            through = outsider.hello(worker_tunnel_address, PORT, source=master_tunnel_address)
        dropped = drops(tunnel_worker) - dropped_before
    after = greedy(tunnel_master)
    print(f"outsider with the master's address: plain worker answered {plain!r}; tunnelled worker: {direct!r} at its "
          f"address, {through!r} at its tunnel address, {dropped} packets dropped by its firewall")
    assert plain == "7.0.0", "the plain worker did not let the outsider in: the attack did not work, so it proves nothing"
    assert (direct, through) == ("timeout", "timeout")
    assert dropped >= 2, "the outsider's packets did not reach the tunnelled worker's firewall"
    assert after == before
    greedy(plain_master)  # cluster_a serves again


def hashed_windows(path, per_tensor=8, width=32):
    """Byte strings from the model's weights, which a load sends to the workers: 32-byte windows at random places in
    each weight tensor (the norms, all 1.0, are left out: their bytes are everywhere)."""
    header, chooser, windows = gguf.read_header(path), random.Random(7), []
    with open(path, "rb") as model:
        for tensor in header["tensors"]:
            size = gguf.data_bytes(tensor)
            if not size or size < 64 * width or "norm" in tensor["name"]:
                continue
            for _window in range(per_tensor):
                model.seek(header["data_offset"] + tensor["offset"] + chooser.randrange(0, size - width))
                windows.append(model.read(width))
    return windows


def load_captured(master, worker):
    """llama-server restarted on the master (its model loads through the worker), captured at the worker's interface:
    (the bytes between the two, the (protocol, port) pairs they used)."""
    with packet_capture.Capture(worker) as capture:
        sh(master, "systemctl restart llama-server")
        greedy(master)
    packets = list(capture.ipv4_packets(interface_address(master), interface_address(worker)))
    return b"".join(payload for *_head, payload in packets), {(protocol, min(source, destination)) for protocol, source, destination, _payload in packets}


def test_a_load_through_the_tunnel_carries_no_model_bytes_in_clear(docker_hosts):
    _client, hosts = docker_hosts
    windows = hashed_windows(MODEL)
    plain_bytes, _plain_ports = load_captured(hosts[PLAIN_MASTER], hosts[PLAIN_WORKER])
    tunnel_bytes, tunnel_ports = load_captured(hosts[TUNNEL_MASTER], hosts[TUNNEL_WORKER])
    in_plain = sum(window in plain_bytes for window in windows)
    in_tunnel = sum(window in tunnel_bytes for window in windows)
    print(f"a load captured at the worker: plain {len(plain_bytes)} bytes with {in_plain} of {len(windows)} model windows "
          f"in clear; tunnel {len(tunnel_bytes)} bytes with {in_tunnel}, over {sorted(tunnel_ports)}")
    assert in_plain > 0, "the plain load showed no model bytes: the capture proves nothing"
    assert len(tunnel_bytes) > 1_000_000, "the tunnelled load captured too little to be the load"
    assert tunnel_ports <= {(17, 51820), (6, 22)}, tunnel_ports  # WireGuard (UDP), and SSH for Ansible's way in
    assert in_tunnel == 0


def test_no_private_key_leaves_its_host(docker_hosts):
    """No host's private key is in any published state or journal of its host, and the key file is root's alone. (That
    no run prints it, every task's result shown, is tests/integration/test_rpc_tunnel.py's: the same tasks.)"""
    _client, hosts = docker_hosts
    for name in (TUNNEL_MASTER, TUNNEL_WORKER):
        private = sh(hosts[name], f"cat {PRIVATE_KEY}")
        assert len(private) == 44
        assert private not in sh(hosts[name], "cat /etc/ansible/facts.d/*.fact")
        assert sh(hosts[name], f"journalctl --no-pager -o cat | grep -cF -- '{private}' || true") == "0"
        assert sh(hosts[name], f"stat -c '%U %a' {PRIVATE_KEY}") == "root 600"
