"""Bad input to rpc_tunnel fails with a message that names the setting or the host and the fix, before WireGuard is
installed or anything is written. Real ansible-playbook runs against real systemd containers: one without the TUN
device (and this machine's kernel has no WireGuard), one with it."""

import ipaddress
from pathlib import Path

import pytest

from tests.integration.bad_input import assert_refused
from tests.tools import containers

PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "rpc_tunnel.yml"
ON = {"rpc_tunnel_enabled": True}


@pytest.fixture(scope="module")
def bare_host(tmp_path_factory):
    name = "llama-rpc-tunnel-badinput-bare"
    with containers.throwaway_host(name, name, tmp_path_factory.mktemp("bare")) as (container, _inventory):
        yield container


@pytest.fixture(scope="module")
def tun_host(tmp_path_factory):
    name = "llama-rpc-tunnel-badinput-tun"  # (docker matches network names by part: not a part of the other's)
    with containers.throwaway_host(name, name, tmp_path_factory.mktemp("tun"), devices=[containers.TUN]) as (container, _inventory):
        yield container


def converge(container, directory, overrides, layout="master"):
    """The container as a cluster's master alone, or (layout 'worker') as the worker of a master that is in the
    inventory but not in the play (--limit), and cannot be read (no such container)."""
    me = f"{container.name} ansible_connection=community.docker.docker"
    lines = (["[llama_master]", me, "[llama_workers]"] if layout == "master" else
             ["[llama_master]", "ghost-master ansible_connection=community.docker.docker", "[llama_workers]", me])
    inventory = Path(directory) / "hosts.ini"
    inventory.write_text("\n".join(lines) + "\n")
    result = containers.run_playbook(inventory, PLAYBOOK, dict(ON, **overrides), limit=container.name)
    untouched = containers.sh(container, "! test -e /etc/llama-rpc-tunnel && ! dpkg -s wireguard-tools")[0] == 0
    return result, untouched


def docker_network(container):
    """The network of the container's eth0 (address/prefix, host bits cleared), as the test bed's docker made it."""
    container.reload()
    settings = next(iter(container.attrs["NetworkSettings"]["Networks"].values()))
    address, prefix = settings["IPAddress"], settings["IPPrefixLen"]
    return str(ipaddress.ip_network(f"{address}/{prefix}", strict=False))


def test_a_host_without_wireguard_or_its_userspace_fallback_is_refused(bare_host, tmp_path):
    result, untouched = converge(bare_host, tmp_path, {})
    assert_refused("no WireGuard", result, [
        f"{bare_host.name} cannot run WireGuard: its kernel", "has no WireGuard module, and it has no TUN device "
        "(/dev/net/tun) for the userspace implementation, wireguard-go", "docker run --device /dev/net/tun",
        "or set rpc_tunnel_enabled: false for its cluster"], untouched)


# Every input rule, case by case, is a unit test (tests/unit/plugins/module_utils/input_rules/, and the
# cluster's in test_tunnel_plan.py); these prove end to end that a refusal touches nothing.
CASES = {
    "key generation 0": ({"rpc_tunnel_key_generation": 0}, "master",
                         ["rpc_tunnel_key_generation=0: a whole number, 1 or more"]),
    "a missing peer": ({}, "worker", ["The master ghost-master is not in this play and has no tunnel this run could read, so "
                                      "llama-rpc-tunnel-badinput-tun would have no peer there: run the play on it too"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_refused_by_name(tun_host, tmp_path, case):
    overrides, layout, messages = CASES[case]
    result, untouched = converge(tun_host, tmp_path, overrides, layout)
    assert_refused(case, result, messages, untouched)


def test_a_tunnel_network_that_overlaps_the_hosts_is_refused_with_a_free_one(tun_host, tmp_path):
    network = docker_network(tun_host)
    result, untouched = converge(tun_host, tmp_path, {"rpc_tunnel_network": network})
    assert_refused("overlap", result, [
        f"rpc_tunnel_network={network} overlaps {network}, the network of eth0 on {tun_host.name}",
        "Choose an rpc_tunnel_network that none of the cluster's hosts uses, such as 10.213.0.0/"], untouched)


def test_a_tunnel_port_another_program_holds_is_refused(tun_host, tmp_path):
    """A host that already runs something on WireGuard's default port (another WireGuard, here a plain UDP socket)."""
    tun_host.exec_run(["python3", "-c", "import socket, time; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                       "s.bind(('0.0.0.0', 51820)); time.sleep(120)", "llama-rpc-udp-holder"], detach=True)
    try:
        # detach returns at once: wait until the socket is bound, so the refusal cannot depend on a race
        bound = containers.sh(tun_host, "for i in $(seq 50); do ss -Hlun 'sport = :51820' | grep -q . && exit 0;"
                              " sleep 0.1; done; exit 1")[0] == 0
        assert bound, "the UDP socket that holds port 51820 did not come up in the container"
        result, untouched = converge(tun_host, tmp_path, {})
    finally:
        tun_host.exec_run(["pkill", "-f", "llama-rpc-udp-holde[r]"])
    assert_refused("port taken", result, [
        "rpc_tunnel_port=51820 is taken on llama-rpc-tunnel-badinput-tun: a socket: UNCONN", "0.0.0.0:51820",
        "Choose another port for the whole cluster"], untouched)
