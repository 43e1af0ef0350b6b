"""Bad input to the gateway fails with a message that names the setting to change, before HAProxy is installed or
anything is written; no key ever appears in the output. Real ansible-playbook runs against a real systemd container;
the masters are inventory entries (their llama-server's address and key), except one that is the same container
under another name and has no llama-server."""

from pathlib import Path

import pytest

from tests.integration.bad_input import assert_refused
from tests.tools import containers

PLAYBOOK = Path(__file__).resolve().parents[3] / "playbooks" / "gateway.yml"
HOST = NETWORK = "llama-rpc-gateway-badinput"
SERVER_KEY = "server-key-not-for-output"
BASE = {"gateway_api_keys": ["client-key-not-for-output"]}
MASTERS = {"master-a": {"rpc_master_server_url": "http://10.9.8.1:8080", "rpc_master_server_api_key": SERVER_KEY},
           "master-b": {"rpc_master_server_url": "http://10.9.8.2:8080", "rpc_master_server_api_key": SERVER_KEY}}


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    directory = tmp_path_factory.mktemp("gateway")
    with containers.throwaway_host(HOST, NETWORK, directory) as (container, _inventory):
        yield container, directory


def converge(host, masters=None, **overrides):
    container, directory = host
    lines = ["[llama_gateway]", f"{HOST} ansible_connection=community.docker.docker", "[llama_master]"]
    for name, variables in (MASTERS if masters is None else masters).items():
        lines.append(" ".join([name] + [f"{key}={value}" for key, value in variables.items()]))
    inventory = directory / "hosts.ini"
    inventory.write_text("\n".join(lines) + "\n")
    result = containers.run_playbook(inventory, PLAYBOOK, dict(BASE, **overrides))
    untouched = containers.sh(container, "! test -e /etc/llama-rpc-gateway && ! dpkg -s haproxy")[0] == 0
    return result, untouched


# Every input rule, case by case, is a unit test (tests/unit/plugins/module_utils/input_rules/); these prove
# end to end that the role asks the rules with the masters' published state and keys, and touches nothing.
CASES = {
    "port 0 and a check that never fails": ({"gateway_port": 0, "gateway_check_fall": 0},
                                            ["gateway_port=0: set it from 1 to 65535. gateway_check_fall=0: set it to 1 or more."]),
    "a certificate that does not exist": ({"gateway_tls_certificate": "/nonexistent/gw.pem", "gateway_tls_private_key": "/etc/hostname"},
                                          ["gateway_tls_certificate='/nonexistent/gw.pem': no such file on the controller."]),
    "a master without llama-server": (
        {"masters": dict(MASTERS, **{"bare-master": {"ansible_connection": "community.docker.docker", "ansible_host": HOST}})},
        ["bare-master has no llama-server: deploy it first (playbooks/deploy.yml)"]),
    "masters with different keys": (
        {"masters": dict(MASTERS, **{"master-b": dict(MASTERS["master-b"], rpc_master_server_api_key="another-server-key")})},
        ["must all have the same non-empty rpc_master_server_api_key"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_refused_by_name_and_no_key_is_shown(host, case):
    overrides, messages = CASES[case]
    result, untouched = converge(host, **overrides)
    assert_refused(case, result, messages, untouched)
    output = result.stdout + result.stderr
    for secret in ("client-key-not-for-output", SERVER_KEY, "another-server-key", "two words"):
        assert secret not in output, f"{case}: {secret!r} is in the output"
