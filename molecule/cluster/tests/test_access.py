"""The AWS access path (molecule.yml): the playbooks reach every host over SSH as `ubuntu` with sudo, the master on its
address and the workers only through it, with host keys checked against what the hosts' consoles printed. The
controller cannot reach a worker itself; a host that cannot be worked on as root stops a run before any change."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import testinfra.utils.ansible_runner

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
sys.path.insert(0, str(ROOT))
from tests.tools import containers  # noqa: E402  pylint: disable=wrong-import-position
from tests.tools.ansible_inventory import unwrapped  # noqa: E402  pylint: disable=wrong-import-position

RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"])
MASTER = RUNNER.get_hosts("cluster_a_master")[0]
WORKER = "llama-worker-1"
RPC_PORT = RUNNER.get_variables(WORKER)["rpc_worker_port"]
KNOWN_HOSTS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "known_hosts"
DEPLOY = ROOT / "playbooks" / "deploy.yml"


def inventory_vars():
    """Every host's variables as the playbooks see them (the scenario's whole inventory: SSH, compose applied)."""
    listed = subprocess.run(["ansible-inventory", "-i", containers.scenario_inventory(), "--list"],
                            capture_output=True, text=True, check=True)
    return unwrapped(json.loads(listed.stdout))["_meta"]["hostvars"]


def connects(address, port):
    """'ok', or why not: a dropped SYN waits out the timeout (1 s: a bridge on this machine answers in microseconds)."""
    try:
        socket.create_connection((address, port), timeout=1).close()
        return "ok"
    except OSError as error:
        return type(error).__name__


def test_the_playbooks_reach_the_hosts_as_on_aws():
    hostvars = inventory_vars()
    master, worker = hostvars[MASTER], hostvars[WORKER]
    assert master["ansible_connection"] == worker["ansible_connection"] == "ssh"
    assert master["ansible_user"] == worker["ansible_user"] == "ubuntu" and master["ansible_become"] is True
    assert master["ansible_host"] == master["public_ip_address"] and master["ansible_ssh_common_args"] == ""
    assert worker["ansible_host"] == worker["private_ip_address"]
    assert worker["ansible_ssh_common_args"] == f"-o ProxyJump=ubuntu@{master['ansible_host']}"
    # Every host's keys came from its console, under the address it is reached on; ssh checks them (ssh_config).
    known = KNOWN_HOSTS.read_text().split()
    assert all(hostvars[name]["ansible_host"] in known for name in RUNNER.get_hosts("all"))
    config = (ROOT / "tests" / "bed" / "ssh_config").read_text()
    assert "StrictHostKeyChecking yes" in config and "UserKnownHostsFile ${MOLECULE_EPHEMERAL_DIRECTORY}/known_hosts" in config


def test_the_controller_cannot_reach_a_worker_but_its_master():
    hostvars = inventory_vars()
    master, workers = hostvars[MASTER]["ansible_host"], [hostvars[name]["ansible_host"] for name in RUNNER.get_hosts("llama_workers")]
    assert connects(master, 22) == "ok"  # the same check, where it must succeed
    for worker in workers:
        assert connects(worker, 22) != "ok", f"the controller reached {worker}:22 directly"
        assert connects(worker, RPC_PORT) != "ok", f"the controller reached {worker}:{RPC_PORT} directly"
    # Root cannot log in, nor a password: key only, as ubuntu.
    root = subprocess.run(["ssh", "-F", str(ROOT / "tests" / "bed" / "ssh_config"), "-o", "PasswordAuthentication=yes",
                           f"root@{master}", "true"], capture_output=True, text=True, timeout=30, check=False)
    assert root.returncode == 255 and "Permission denied (publickey)" in root.stderr, root.stderr


def refused_before_any_change(run, *expected):
    output = run.stdout + run.stderr
    print(*[line for line in output.splitlines() if line.startswith(("fatal:", "[ERROR]:"))], sep="\n")
    assert run.returncode != 0, output[-3000:]
    for text in expected:
        assert text in output, f"{text!r} not in:\n{output[-3000:]}"
    assert "every host answers, as root, before anything changes" in output
    assert set(containers.changed_per_host(run.stdout).values()) <= {0}, output[-3000:]
    # Only the first play ran: no role's task started.
    assert "TASK [graviton.llama_rpc.llama_build" not in output, output[-3000:]


def deploy_with_ssh_config(tmp_path, config_lines, limit="cluster_a"):
    config = tmp_path / "ssh_config"
    config.write_text("\n".join(config_lines) + "\n")
    env = dict(os.environ, ANSIBLE_SSH_ARGS=f"-F {config} -o ControlMaster=no")
    return subprocess.run(["ansible-playbook", "-i", containers.scenario_inventory(), "--limit", limit, str(DEPLOY)],
                          capture_output=True, text=True, timeout=600, check=False, env=env)


def test_a_worker_whose_host_key_changed_stops_the_run(tmp_path):
    worker = inventory_vars()[WORKER]["ansible_host"]
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    forged = tmp_path / "known_hosts"
    forged.write_text("".join(line + "\n" for line in KNOWN_HOSTS.read_text().splitlines()
                              if not line.startswith(f"{worker} "))
                      + f"{worker} {Path(str(other) + '.pub').read_text().split()[0]} {Path(str(other) + '.pub').read_text().split()[1]}\n")
    run = deploy_with_ssh_config(tmp_path, [f"IdentityFile {os.environ['LLAMA_RPC_TEST_SSH_KEY']}", "IdentitiesOnly yes",
                                            f"UserKnownHostsFile {forged}", "StrictHostKeyChecking yes", "BatchMode yes"])
    refused_before_any_change(run, f"{WORKER} ({worker}): its SSH host key is not the one known_hosts holds",
                              f"ssh-keygen -R {worker}")


def test_a_jump_host_that_refuses_the_key_stops_the_run(tmp_path):
    hostvars = inventory_vars()
    master, worker = hostvars[MASTER]["ansible_host"], hostvars[WORKER]["ansible_host"]
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    # The worker would take the test bed's key; its jump host (the master) is offered one it does not know.
    run = deploy_with_ssh_config(tmp_path, [f"Host {master}", f"  IdentityFile {other}", f"Host * !{master}",
                                            f"  IdentityFile {os.environ['LLAMA_RPC_TEST_SSH_KEY']}", "Host *", "  IdentitiesOnly yes",
                                            f"  UserKnownHostsFile {KNOWN_HOSTS}", "  StrictHostKeyChecking yes", "  BatchMode yes"],
                                 limit=WORKER)
    refused_before_any_change(run, f"{WORKER} ({worker}) is reached through the jump host {master}, which refused the SSH key",
                              "ssh does not hand -i on to ProxyJump")


def test_sudo_that_asks_for_a_password_stops_the_run(tmp_path):
    rule = "/etc/sudoers.d/90-cloud-init-users"
    worker = RUNNER.get_host(WORKER)
    kept = tmp_path / "sudoers"
    kept.write_text(worker.file(rule).content_string)
    worker.check_output(f"echo 'ubuntu ALL=(ALL) ALL' > {rule}")
    try:
        run = deploy_with_ssh_config(tmp_path, [f"IdentityFile {os.environ['LLAMA_RPC_TEST_SSH_KEY']}", "IdentitiesOnly yes",
                                                f"UserKnownHostsFile {KNOWN_HOSTS}", "StrictHostKeyChecking yes", "BatchMode yes"])
    finally:
        worker.check_output(f"echo '{kept.read_text().strip()}' > {rule}")
    assert worker.file(rule).content_string.strip() == "ubuntu ALL=(ALL) NOPASSWD:ALL"
    refused_before_any_change(run, f"{WORKER} (", "sudo asks ubuntu for a password", "90-cloud-init-users")
