"""Throwaway systemd hosts for tests and benchmarks that drive Ansible directly (not via Molecule):
the same base images and container options as the Molecule scenarios."""

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import tarfile
import threading
import time
import uuid
from pathlib import Path

import docker

IMAGE = "llama-rpc-testbed:bookworm"


# The TUN device, for wireguard-go (the rpc_tunnel role's userspace WireGuard: this machine's kernel has none).
TUN = "/dev/net/tun:/dev/net/tun:rwm"


def start_host(client, name, network, image=IMAGE, volumes=None, extra_caps=(), devices=()):
    """Start one systemd container on a docker network and wait until it has booted."""
    if not named_networks(client, network):
        client.networks.create(network)
    options = dict(image=image, command="/lib/systemd/systemd", detach=True, network=network, hostname=name,
                   cgroupns="host", tmpfs={"/run": "", "/run/lock": "", "/tmp": ""}, stop_signal="SIGRTMIN+3",
                   volumes={"/sys/fs/cgroup": {"bind": "/sys/fs/cgroup", "mode": "rw"}, **(volumes or {})},
                   devices=list(devices))
    if os.environ.get("LLAMA_RPC_TEST_CPU_SHARES"):  # tests/run.sh: a check beside the cluster scenario yields to it
        options["cpu_shares"] = int(os.environ["LLAMA_RPC_TEST_CPU_SHARES"])
    if os.environ.get("LLAMA_RPC_TEST_PRIVILEGED") == "true":
        options["privileged"] = True
    else:
        options["cap_add"] = ["SYS_ADMIN", *extra_caps]
    remove_named(client, name)  # left by an interrupted run: its name would refuse the new one (409 Conflict)
    container = client.containers.run(name=name, **options)
    wait_until_booted(container)
    return container


def wait_until_booted(container, timeout=120):
    """Until systemd has finished booting. Asked too early, before systemd's bus exists, `systemctl
    is-system-running --wait` fails at once, and a test would then race the boot (tmpfiles, apt's keys)."""
    deadline = time.monotonic() + timeout
    while True:
        state = container.exec_run(["systemctl", "is-system-running", "--wait"]).output.decode().strip()
        if state in ("running", "degraded"):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{container.name} did not finish booting in {timeout} s: {state}")
        time.sleep(0.5)


def stop_cluster(hosts):
    """Stops a cluster's containers, the first (its master) first: what a stop of its machines is."""
    for container in hosts:
        container.stop(timeout=30)


def start_cluster(hosts):
    """Starts them again in the order they were made, each booted before the next: docker then gives each the address it
    had (the worker list names them by address), and the master is up before its workers, as after a stop of all."""
    for container in hosts:
        container.start()
        wait_until_booted(container)


def run(container, argv, timeout=3600, split=False):
    """(exit code, output) of argv run in the container: output is stdout and stderr together, in order, as bytes, or
    with split (stdout, stderr).

    Not exec_run's output alone: docker now and then hands back an exec's output as b"" though the command printed and
    exited 0 (docker/docker-py#2042, moby/moby#27289; once here, an empty read of a fact file that was whole). The
    command's output goes to a file in the container too, and comes back between two marks of this call: when a mark
    is missing from what the exec returned, the file is read instead (an archive request, which has no stream to
    lose; about 0.1 s more, so not every time). A thread's next call removes its files."""
    api = container.client.api
    token = uuid.uuid4().hex
    # under /var/tmp: /tmp and /run are tmpfs mounts in these containers, which docker's archive does not see
    prefix = f"/var/tmp/.llama-rpc-test-exec.{os.getpid()}.{threading.get_ident()}"
    capture = f"{prefix}.{token}"
    redirect = '>"$capture.out" 2>"$capture.err"' if split else '>"$capture.out" 2>&1'
    script = (f'capture=$1; shift; rm -f "{prefix}".*; "$@" {redirect} </dev/null; rc=$?; '
              f'printf "{token}\\n"; cat "$capture.out"; printf "\\n{token} %d\\n" "$rc"; exit "$rc"')
    exec_id = api.exec_create(container.id, ["sh", "-c", script, "sh", capture, *argv])["Id"]
    returned = api.exec_start(exec_id)
    opening, closing = f"{token}\n".encode(), f"\n{token} ".encode()
    if not split and returned.startswith(opening) and closing in returned:
        output, _closing, code = returned[len(opening):].rpartition(closing)
        return int(code), output
    deadline = time.monotonic() + timeout
    # not running and no exit code yet: not started
    while (state := api.exec_inspect(exec_id))["Running"] or state["ExitCode"] is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"{container.name}: {argv} still runs after {timeout} s")
        time.sleep(0.02)
    output = read_file(container, capture + ".out")
    return state["ExitCode"], ((output, read_file(container, capture + ".err")) if split else output)


def read_file(container, path):
    """A regular file's bytes in the container, fetched as an archive (see run for why not `cat`)."""
    stream, _stat = container.get_archive(path)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
        member = archive.next()
        if not member.isfile():
            raise AssertionError(f"{container.name}: {path} is not a regular file")
        return archive.extractfile(member).read()


def served_files(master):
    """What rpc_master serves on master: its model's files, (inode, size, sha256) by path, found through its published
    state."""
    state = json.loads(read_file(master, "/etc/ansible/facts.d/llama_rpc_master.fact"))
    listing = checked_sh(master, "cd %s && for f in $(ls -A); do echo $(stat -c '%%i %%s' $f) $(sha256sum < $f "
                                 "| cut -c1-64) $PWD/$f; done" % shlex.quote(str(Path(state["model_path"]).parent)))
    return {line.split()[3]: tuple(line.split()[:3]) for line in listing.splitlines()}


def server_pid(master):
    """llama-server's main pid on master (0 when it does not run)."""
    return int(checked_sh(master, "systemctl show -p MainPID --value llama-server"))


def sh(container, command):
    """A shell command in the container: (exit code, its output stripped)."""
    code, output = run(container, ["sh", "-c", command])
    return code, output.decode("utf-8", "replace").strip()


def checked_sh(container, command):
    """A shell command in the container that must succeed: its output stripped (a failure is an AssertionError with
    the container, the command and the output's end)."""
    code, output = sh(container, command)
    assert code == 0, f"{container.name}: {command}: exit {code}: {output[-2000:]}"
    return output


def security_exposure(analysis):
    """The overall exposure level in `systemd-analyze security UNIT`'s output (0 best, 10 worst): it prints no JSON of it."""
    found = re.search(r"^\W*Overall exposure level for \S+: ([\d.]+)", analysis, re.M)
    if not found:
        raise AssertionError(f"no overall exposure level in systemd-analyze's output:\n{analysis[-2000:]}")
    return float(found.group(1))


def tar_of(path, name=None):
    """A file as the tar stream docker's put_archive takes (named name there, else as it is named here)."""
    stream = io.BytesIO()
    with tarfile.open(fileobj=stream, mode="w") as tar:
        tar.add(str(path), arcname=name or Path(path).name)
    return stream.getvalue()


def remove(client, containers, network):
    for container in containers:
        container.remove(force=True)
    for net in named_networks(client, network):
        net.remove()


def remove_named(client, name):
    """Removes the container called exactly name, killed if it runs (docker's name filter is a pattern: anchored here).
    True if there was one."""
    found = client.containers.list(all=True, filters={"name": f"^{name}$"})
    for container in found:
        container.remove(force=True)
    return bool(found)


def named_networks(client, name):
    """The docker networks called name. docker's name filter matches a part of the name too: "llama-rpc-master" would
    find the network of another test running beside ("llama-rpc-master-badinput"), and remove it from under it."""
    return [network for network in client.networks.list(names=[name]) if network.name == name]


def inventory(path, names, group="all"):
    path.write_text(f"[{group}]\n" + "".join(f"{name} ansible_connection=community.docker.docker\n" for name in names))
    return path


def archive_source_vars():
    """The llama_build variables for the pinned test archive (tests/bed/env.sh)."""
    return {
        "llama_build_source": "archive",
        "llama_build_version": os.environ["LLAMA_RPC_TEST_LLAMA_VERSION"],
        "llama_build_archive_src": os.environ["LLAMA_RPC_TEST_ARCHIVE"],
        "llama_build_archive_sha256": os.environ["LLAMA_RPC_TEST_ARCHIVE_SHA256"],
        "llama_build_archive_subdir": os.environ["LLAMA_RPC_TEST_ARCHIVE_SUBDIR"],
        "llama_build_archive_commit": os.environ["LLAMA_RPC_TEST_ARCHIVE_COMMIT"],
    }


@contextlib.contextmanager
def throwaway_host(name, network, directory, volumes=None, devices=()):
    """One fresh systemd host and an inventory for it; removed afterwards. Yields (container, inventory)."""
    client = docker.from_env()
    container = start_host(client, name, network, volumes=volumes, devices=devices)
    try:
        yield container, inventory(Path(directory) / "hosts.ini", [name])
    finally:
        remove(client, [container], network)


def scenario_inventory():
    """A Molecule scenario's whole inventory, its directory: the hosts as playbooks reach them (in the cluster scenario,
    over SSH as `ubuntu`, the workers through their master). MOLECULE_INVENTORY_FILE alone is Molecule's docker
    connection: what the tests' own eyes (testinfra) use, not the path under test."""
    return str(Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent)


def run_playbook(inventory_path, playbook, extra_vars, timeout=600, tags=None, limit=None, verbose=False):
    """ansible-playbook with extra vars (as JSON), only the given tags and hosts if any, each task's result printed
    when verbose (-v); returns the CompletedProcess (text)."""
    return subprocess.run(["ansible-playbook", "-i", str(inventory_path), str(playbook), "-e", json.dumps(extra_vars)]
                          + (["--tags", tags] if tags else []) + (["--limit", limit] if limit else [])
                          + (["-v"] if verbose else []),
                          capture_output=True, text=True, timeout=timeout, check=False)


def changed_per_host(output):
    """The play recap's changed count per host: {host: count}."""
    return {name: int(changed) for name, changed in re.findall(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)", output, re.M)}


def task_output(output, task):
    """What ansible-playbook printed under TASK [<task>] ('namespace.collection.role : name'), up to the next task."""
    return output.split(f"TASK [{task}]", 1)[1].split("TASK [", 1)[0]
