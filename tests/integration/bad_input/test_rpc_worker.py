"""Bad input to rpc_worker fails with a message that names the variable to change, before any change
on the host. Real ansible-playbook runs against a real systemd container."""

from pathlib import Path

import pytest

from tests.integration.bad_input import assert_refused
from tests.tools import containers

PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "rpc_worker.yml"
NETWORK = "llama-rpc-worker-badinput"
HOST = "llama-rpc-worker-badinput"
# Preflight fails before the worker program is needed; the master's address is given explicitly.
BASE = {"rpc_worker_binary": "/opt/llama.cpp/current/bin/ggml-rpc-server", "rpc_worker_allowed_sources": ["10.9.9.9"]}


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    with containers.throwaway_host(HOST, NETWORK, tmp_path_factory.mktemp("inventory")) as started:
        yield started


def converge(host, **overrides):
    container, inventory = host
    extra = dict(BASE, **overrides)
    result = containers.run_playbook(inventory, PLAYBOOK, extra)
    untouched = containers.sh(container, "! getent passwd llama-rpc && ! test -e /etc/llama-rpc-worker")[0] == 0
    return result, untouched


# Every input rule, case by case, is a unit test (tests/unit/plugins/module_utils/input_rules/); these prove
# end to end that the role asks the rules with what it resolved (its defaults, rpc_tunnel's published state) and
# that a refusal touches nothing on the host.
CASES = {
    "port out of range": ({"rpc_worker_port": 70000}, ["rpc_worker_port=70000 must be from 1 to 65535"]),
    "bind address not on the host": ({"rpc_worker_bind_address": "10.123.45.67"},
                                     ["rpc_worker_bind_address=10.123.45.67 is not an address of"]),
    "every interface without the override": ({"rpc_worker_bind_address": "0.0.0.0"},
                                             ["unauthenticated", "rpc_worker_allow_any_address: true"]),
    "no worker program": ({"rpc_worker_binary": ""}, ["run the graviton.llama_rpc.llama_build role", "rpc_worker_binary"]),
    # on the WireGuard tunnel (as rpc_tunnel publishes it) the worker's address and its master's are the tunnel's
    "settings that would undo the tunnel": (
        {"rpc_tunnel_current": {"address": "10.213.0.2", "interface": "llama-rpc", "unit": "llama-rpc-tunnel",
                                "peers": [{"host": "m", "address": "10.213.0.1", "public_key": "k"}]},
         "rpc_worker_bind_address": "10.213.0.2", "rpc_worker_allow_any_address": True},
        ["is on the WireGuard tunnel (rpc_tunnel_enabled), where the worker listens on its tunnel address only",
         "but rpc_worker_bind_address is 10.213.0.2 and rpc_worker_allow_any_address is true and "
         "rpc_worker_allowed_sources is 10.9.9.9: leave them unset, or set rpc_tunnel_enabled: false"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_refused_by_name(host, case):
    overrides, messages = CASES[case]
    result, untouched = converge(host, **overrides)
    assert_refused(case, result, messages, untouched)


def test_a_port_in_use_is_refused_by_name(host):
    container = host[0]
    container.exec_run(["sh", "-c", "python3 -m http.server 50052 >/dev/null 2>&1 &"], detach=True)
    try:
        result, untouched = converge(host)
    finally:
        container.exec_run(["pkill", "-f", "http.server 50052"])
    assert result.returncode != 0
    assert "Port 50052 (instance main) is already in use" in result.stdout and "rpc_worker_port" in result.stdout
    assert untouched


def test_two_bad_addresses_are_named_together_and_nothing_else(host):
    result, untouched = converge(host, rpc_worker_bind_address="10.0.0.5/24", rpc_worker_allowed_sources=["10.9.9.9", "fd00::1/64"])
    assert result.returncode != 0 and untouched
    assert "rpc_worker_bind_address='10.0.0.5/24'" in result.stdout and "entry 'fd00::1/64'" in result.stdout, result.stdout[-3000:]
    assert "'10.9.9.9'" not in result.stdout, "a good source was named"


def test_a_master_group_of_several_clusters_is_refused(host, tmp_path):
    """An inventory of two clusters whose workers were not given their own master's group: the worker would let
    both masters in, so it refuses, naming both and the settings that fix it."""
    container, _inventory = host
    inventory = containers.inventory(tmp_path / "two-masters.ini", [container.name])
    inventory.write_text(inventory.read_text() + "[llama_master]\nmaster-a ansible_host=10.9.8.1\nmaster-b ansible_host=10.9.8.2\n")
    result = containers.run_playbook(inventory, PLAYBOOK, dict(BASE, rpc_worker_allowed_sources=[]), limit=container.name)
    untouched = containers.sh(container, "! getent passwd llama-rpc && ! test -e /etc/llama-rpc-worker")[0] == 0
    assert_refused("two masters", result, ["Group 'llama_master' holds master-a, master-b", "rpc_master_group and rpc_master_worker_group"],
                   untouched)
