"""Verify the test bed: the unit runs hardened on every host, and each host reaches the others."""

import os

import testinfra.utils.ansible_runner

RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"])
testinfra_hosts = RUNNER.get_hosts("bed")
PORT = 8099


def private_address(host):
    return host.interface.default().addresses[0]


def test_systemd_is_pid_1(host):
    assert host.process.get(pid=1).comm == "systemd"


def test_unit_enabled_and_running(host):
    service = host.service("bed-http.service")
    assert service.is_enabled
    assert service.is_running


def test_unit_runs_unprivileged(host):
    pid = host.check_output("systemctl show -p MainPID --value bed-http.service")
    assert pid != "0", "bed-http.service has no main process"
    assert host.check_output(f"ps -o uid= -p {pid}").strip() != "0"


def test_listens_only_on_private_address(host):
    address = private_address(host)
    assert host.socket(f"tcp://{address}:{PORT}").is_listening
    assert not host.socket(f"tcp://0.0.0.0:{PORT}").is_listening


def test_peers_reach_each_other(host):
    for peer_name in testinfra_hosts:
        if peer_name == host.backend.get_hostname():
            continue
        peer = RUNNER.get_host(peer_name)
        url = f"http://{private_address(peer)}:{PORT}/whoami"
        page = host.check_output(
            f"python3 -c 'import urllib.request; print(urllib.request.urlopen(\"{url}\", timeout=5).read().decode())'"
        )
        assert page.strip() == peer_name
