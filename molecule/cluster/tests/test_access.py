"""The AWS access path (molecule.yml): the playbooks reach every host over SSH as `ubuntu` with sudo, the master on its
address and the workers only through it, with host keys checked against what the hosts' consoles printed. The
controller cannot reach a worker itself; a host that cannot be worked on as root stops a run before any change."""

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from urllib.parse import urlparse
from pathlib import Path

import boto3
import testinfra.utils.ansible_runner

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
sys.path.insert(0, str(ROOT))
from tests.tools import containers  # noqa: E402  pylint: disable=wrong-import-position
from tests.tools.llama_cpp import free_port, wait_for_port  # noqa: E402  pylint: disable=wrong-import-position
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
    # Every host's keys came from its console, through the AWS API, under the address it is reached on: prepare.yml
    # left no known_hosts, site.yml's first play wrote it. ssh checks them (ssh_config).
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


def refused_before_any_change(run, *expected, keys_trusted=False):
    output = run.stdout + run.stderr
    print(*[line for line in output.splitlines() if line.startswith(("fatal:", "[ERROR]:"))], sep="\n")
    assert run.returncode != 0, output[-3000:]
    for text in expected:
        assert text in output, f"{text!r} not in:\n{output[-3000:]}"
    assert "every host answers, as root, before anything changes" in output
    # Nothing changed on a host; with keys_trusted, the controller's known_hosts did (the task runs delegated to it, and
    # the recap counts the change for the host whose keys were new).
    changed = containers.changed_per_host(run.stdout)
    assert sum(changed.values()) == (1 if keys_trusted else 0), output[-3000:]
    if keys_trusted:
        assert re.search(r"^changed: \[\S+ -> localhost\] => \(item=", output, re.M), output[-3000:]
    # Only the first play ran: no role's task started.
    assert "TASK [graviton.llama_rpc.llama_build" not in output, output[-3000:]


def deploy_with_ssh_config(tmp_path, config_lines, limit="cluster_a", extra_vars=None):
    config = tmp_path / "ssh_config"
    config.write_text("\n".join(config_lines) + "\n")
    env = dict(os.environ, ANSIBLE_SSH_ARGS=f"-F {config} -o ControlMaster=no")
    return subprocess.run(["ansible-playbook", "-i", containers.scenario_inventory(), "--limit", limit, str(DEPLOY),
                           "-e", json.dumps(extra_vars or {})],
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


def test_a_console_that_shows_another_key_than_the_host_stops_the_run(tmp_path):
    """The host keys site.yml trusts come from the instance's console through the AWS API; when the key the console
    printed is not the one the host shows, ssh refuses the host, by name, before anything changes."""
    worker_vars = inventory_vars()[WORKER]
    worker = worker_vars["ansible_host"]
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    forged_key = " ".join(Path(str(other) + ".pub").read_text().split()[:2])
    ec2 = boto3.client("ec2", region_name=worker_vars["placement"]["region"], endpoint_url=os.environ["AWS_URL"])  # the stand-in
    forged_console = f"-----BEGIN SSH HOST KEY KEYS-----\n{forged_key} root@forged\n-----END SSH HOST KEY KEYS-----\n"
    instance = ec2.run_instances(ImageId=ec2.describe_images()["Images"][0]["ImageId"], InstanceType="c8g.large",
                                 MinCount=1, MaxCount=1, TagSpecifications=[{"ResourceType": "instance", "Tags": [
                                     {"Key": "testbed/console", "Value": forged_console}]}])["Instances"][0]["InstanceId"]
    # Every host known but the worker, which the run then reads from the forged console.
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("".join(line + "\n" for line in KNOWN_HOSTS.read_text().splitlines()
                                   if not line.startswith(f"{worker} ")))
    run = deploy_with_ssh_config(tmp_path, [f"IdentityFile {os.environ['LLAMA_RPC_TEST_SSH_KEY']}", "IdentitiesOnly yes",
                                            f"UserKnownHostsFile {known_hosts}", "StrictHostKeyChecking yes", "BatchMode yes"],
                                 limit=WORKER, extra_vars={"aws_infra_known_hosts_file": str(known_hosts), "instance_id": instance})
    # taken from the console, through the AWS API, in a run limited to the worker
    assert f"{worker} {forged_key}" in known_hosts.read_text(), (run.stdout + run.stderr)[-3000:]
    refused_before_any_change(run, f"{WORKER} ({worker}): its SSH host key is not the one known_hosts holds",
                              "do not connect: something else answers", keys_trusted=True)


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


def get(url, key=None):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_readme_line_reaches_llama_server_from_a_laptop():
    """The README's SSH forward, with the addresses the summary prints: llama-server on the master's private address,
    reached from the controller through SSH to the master, behind its API key."""
    readme = (ROOT / "README.md").read_text()
    [line] = [line.strip() for block in re.findall(r"^```sh\n(.*?)^```", readme, re.M | re.S)
              for line in block.splitlines() if line.startswith("ssh -N -L")]
    served = urlparse(json.loads(RUNNER.get_host(MASTER).file("/etc/ansible/facts.d/llama_rpc_master.fact").content_string)["server_url"])
    local_port = free_port()
    command = line.replace("8080:10.0.1.10:8080", f"{local_port}:{served.hostname}:{served.port}")
    command = command.replace("<master public address>", inventory_vars()[MASTER]["ansible_host"])
    assert "10.0.1.10" not in command and "<" not in command, f"the README's line changed shape: {line}"
    argv = shlex.split(command)
    # The user's ssh configuration: the key, and the known hosts site.yml wrote from the consoles.
    tunnel = subprocess.Popen(argv[:1] + ["-F", str(ROOT / "tests" / "bed" / "ssh_config")] + argv[1:])
    try:
        wait_for_port(local_port, tunnel)
        key = RUNNER.get_variables(MASTER)["rpc_master_server_api_key"]
        status, body = get(f"http://127.0.0.1:{local_port}/v1/models", key)
        assert status == 200 and json.loads(body)["data"], body
        assert get(f"http://127.0.0.1:{local_port}/v1/models")[0] == 401
    finally:
        tunnel.terminate()
        tunnel.wait(timeout=30)
