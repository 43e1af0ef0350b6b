"""The RPC workers: hardened, bound to the private address, reachable from the master only (the other worker is the
outsider: a peer on the same network), self-healing."""

import os
import sys
import time
from pathlib import Path

import pytest
import testinfra
import testinfra.utils.ansible_runner

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
sys.path.insert(0, str(ROOT))
from tests.tools import containers  # noqa: E402  pylint: disable=wrong-import-position

RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"])
# cluster_a's (molecule.yml holds two clusters; its workers are each other's outsiders).
WORKERS = RUNNER.get_hosts("cluster_a_workers")
MASTER = RUNNER.get_hosts("cluster_a_master")[0]
testinfra_hosts = WORKERS
UNIT = "llama-rpc-worker@main.service"
PORT = RUNNER.get_variables(WORKERS[0])["rpc_worker_port"]  # the scenario's one value (molecule.yml)
OFFLINE = "llama-worker-1"  # no route to a package mirror (prepare.yml)
# Reaches the Debian mirror when there is a route; the check that the host is really cut off.
CAN_REACH_MIRROR = "import socket; socket.create_connection(('deb.debian.org', 80), timeout=5)"


def address(host):
    return host.interface.default().addresses[0]


def connect(from_host, to_address, timeout=3):
    """Whether from_host gets a TCP connection to to_address:PORT ('ok', or the error)."""
    script = ("import socket,sys\n"
              f"try:\n socket.create_connection(('{to_address}', {PORT}), timeout={timeout}).close(); print('ok')\n"
              "except Exception as e:\n print(type(e).__name__)")
    return from_host.check_output(f'python3 -c "{script}"')


def test_unit_enabled_active_unprivileged(host):
    service = host.service(UNIT)
    assert service.is_enabled and service.is_running
    pid = host.check_output(f"systemctl show -p MainPID --value {UNIT}")
    assert host.check_output(f"ps -o user= -p {pid}").strip() == "llama-rpc"
    assert host.user("llama-rpc").shell == "/usr/sbin/nologin"


def test_listens_only_on_the_private_address(host):
    listeners = host.check_output(f"ss -Hltn 'sport = :{PORT}'")
    assert f"{address(host)}:{PORT}" in listeners
    assert f"0.0.0.0:{PORT}" not in listeners and f"*:{PORT}" not in listeners


def test_threads_and_cache(host):
    env = host.file("/etc/llama-rpc-worker/main.env").content_string
    assert f"RPC_WORKER_THREADS={host.check_output('nproc')}" in env and "-c" in env
    cache = host.file("/var/cache/llama-rpc-worker/main")
    assert cache.is_directory and cache.user == "llama-rpc" and cache.mode == 0o700


def test_master_probe_sees_protocol_and_memory(host):
    # the ansible backend, which can run our module on the master
    master = testinfra.get_host(f"ansible://{MASTER}?ansible_inventory={os.environ['MOLECULE_INVENTORY_FILE']}")
    # llama-server holds every worker (one client at a time): the probe gets the worker while the server is stopped.
    master.check_output("systemctl stop llama-server")
    try:
        result = master.ansible("graviton.llama_rpc.rpc_probe", f"workers={address(host)}:{PORT} timeout=10", check=False)
    finally:
        master.check_output("systemctl start llama-server")
    worker = result["workers"][0]
    assert worker["state"] == "ok", worker
    assert worker["protocol"] == "7.0.0"
    assert worker["devices"] and worker["devices"][0]["total"] > 0 and worker["free_total"] > 0


def test_outsider_is_refused_or_dropped_and_master_gets_in(host):
    outsider = RUNNER.get_host(next(name for name in WORKERS if name != host.backend.get_hostname()))
    master = RUNNER.get_host(MASTER)
    assert connect(outsider, address(host)) in ("timeout", "ConnectionRefusedError", "TimeoutError")
    assert connect(master, address(host)) == "ok"
    rules = host.check_output("nft list table inet llama_rpc_worker")
    assert address(master) in rules and "drop" in rules


def test_killed_worker_is_back_within_5_seconds(host):
    old_pid = host.check_output(f"systemctl show -p MainPID --value {UNIT}")
    host.run(f"kill -9 {old_pid}")
    killed = time.monotonic()
    while time.monotonic() - killed < 10:
        pid = host.check_output(f"systemctl show -p MainPID --value {UNIT}")
        if pid not in ("0", old_pid) and f":{PORT}" in host.check_output(f"ss -Hltn 'sport = :{PORT}'"):
            break
        time.sleep(0.2)
    back_after = time.monotonic() - killed
    print(f"{host.backend.get_hostname()}: worker back {back_after:.1f}s after kill -9")
    assert back_after < 5
    journal = host.check_output(f"journalctl -u {UNIT} --no-pager -n 50")
    assert "status=9/KILL" in journal and "Scheduled restart job" in journal


@pytest.mark.parametrize("unit", [UNIT, "llama-rpc-worker-cache-guard@main.service"])
def test_systemd_security_exposure(host, unit):
    """The worker, and its cache guard (which reads and prunes what the worker writes), run and are sandboxed."""
    assert host.service(unit).is_running
    out = host.check_output(f"systemd-analyze security {unit} --no-pager")
    exposure = containers.security_exposure(out)
    print(f"{host.backend.get_hostname()}: {unit}: systemd-analyze security exposure {exposure}")
    assert exposure <= 2.0


def test_a_worker_without_a_package_mirror_deploys_without_apt():
    """A worker in a private subnet without a NAT gateway, whose image has what it needs (nftables, libgomp1): it was
    deployed while cut off (its unit runs, its firewall holds the master) and no role ran apt there."""
    offline = RUNNER.get_host(OFFLINE)
    assert offline.run(f'python3 -c "{CAN_REACH_MIRROR}"').rc != 0, "the host still reaches the mirror"
    assert offline.service(UNIT).is_running
    master = RUNNER.get_host(MASTER)
    assert address(master) in offline.check_output("nft list table inet llama_rpc_worker")
    assert offline.run("cmp /var/log/apt/history.log /root/apt-history-at-prepare.log").rc == 0, "apt installed something"


def deploy_workers(extra_vars=None):
    """deploy.yml's worker part (--tags rpc_worker), with extra variables; returns the recap's changed count per host."""
    run = containers.run_playbook(containers.scenario_inventory(), ROOT / "playbooks" / "deploy.yml", extra_vars or {},
                                  timeout=900, tags="rpc_worker", limit="cluster_a")
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    return containers.changed_per_host(run.stdout)


# Last in this file: turning the watchdog off changes the workers' unit (one Wants= fewer), so they restart.
def test_a_watchdog_turned_off_is_stopped_and_removed_and_turned_on_comes_back():
    """rpc_worker_watchdog_enabled=false stops the watchdog beside each worker and removes its unit and script, and a
    second run changes nothing (the unit is gone: nothing left to stop); turned on again, it runs beside the worker."""
    watchdog, unit_file = "llama-rpc-worker-watchdog@main.service", "/etc/systemd/system/llama-rpc-worker-watchdog@.service"
    script = "/usr/local/lib/llama-rpc-worker-watchdog.py"
    off = {"rpc_worker_watchdog_enabled": False}
    deploy_workers(off)
    for name in WORKERS:
        worker = RUNNER.get_host(name)
        assert not worker.service(watchdog).is_running, name
        assert not worker.file(unit_file).exists and not worker.file(script).exists, name
        assert worker.service(UNIT).is_running, name
    again = deploy_workers(off)
    assert all(again[name] == 0 for name in WORKERS), again
    deploy_workers()
    for name in WORKERS:
        worker = RUNNER.get_host(name)
        assert worker.service(watchdog).is_running and worker.file(unit_file).exists, name
