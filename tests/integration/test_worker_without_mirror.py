"""A worker with no route to a package mirror (AWS's private subnet without a NAT gateway) deploys when its image
already has what the worker needs (nftables, libgomp1), as Ubuntu's cloud images do: rpc_worker then runs no apt at
all. A real systemd host whose default route leads nowhere, the real worker program, the real firewall."""

from pathlib import Path

import docker
import pytest

from tests.tools import containers

PLAYBOOK = Path(__file__).resolve().parents[1] / "playbooks" / "rpc_worker.yml"
NETWORK = "llama-rpc-no-mirror"
HOST = "llama-rpc-no-mirror"
BINARY = "/opt/llama-test/bin/ggml-rpc-server"
# Reaches the Debian mirror when there is a route; the check that the host is really cut off.
CAN_REACH_MIRROR = "import socket; socket.create_connection(('deb.debian.org', 80), timeout=5)"


@pytest.fixture(scope="module")
def offline_host(tmp_path_factory, x86_build):
    client = docker.from_env()
    container = containers.start_host(client, HOST, NETWORK, extra_caps=("NET_ADMIN",))
    try:
        # The image's packages, installed while the host still has its route (Ubuntu's cloud image ships them),
        # and package lists as old as an image built weeks before it boots.
        installed = container.exec_run(["sh", "-c", "apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
                                        "apt-get install -y -qq nftables libgomp1 && rm -rf /var/lib/apt/lists/* "
                                        "&& touch -d '30 days ago' /var/lib/apt/lists"])
        assert installed.exit_code == 0, installed.output.decode()[-2000:]
        # Then the default route leads to an address nobody holds: the host keeps its private address and
        # its default-route interface (as in a private subnet), but nothing beyond the docker network answers.
        subnet_gateway = client.networks.get(NETWORK).attrs["IPAM"]["Config"][0]["Gateway"]
        dead_end = subnet_gateway.rsplit(".", 1)[0] + ".254"
        rerouted = container.exec_run(["ip", "route", "replace", "default", "via", dead_end])
        assert rerouted.exit_code == 0, rerouted.output.decode()
        assert container.exec_run(["python3", "-c", CAN_REACH_MIRROR]).exit_code != 0, "the host still reaches the mirror"
        container.exec_run(["mkdir", "-p", "/opt/llama-test/bin"])
        container.put_archive("/opt/llama-test/bin", containers.tar_of(x86_build / "ggml-rpc-server"))
        yield container, containers.inventory(tmp_path_factory.mktemp("inventory") / "hosts.ini", [HOST])
    finally:
        containers.remove(client, [container], NETWORK)


def test_worker_deploys_without_a_package_mirror(offline_host):
    container, inventory = offline_host
    extra = {"rpc_worker_binary": BINARY, "rpc_worker_allowed_sources": ["10.9.9.9"]}
    result = containers.run_playbook(inventory, PLAYBOOK, extra)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    install = containers.task_output(output, "graviton.llama_rpc._common : Install nftables")
    assert f"skipping: [{HOST}]" in install, f"apt ran for a package the host has:\n{install}"
    assert container.exec_run(["systemctl", "is-active", "llama-rpc-worker@main.service"]).exit_code == 0
    ruleset = container.exec_run(["nft", "list", "table", "inet", "llama_rpc_worker"]).output.decode()
    assert "10.9.9.9" in ruleset, ruleset

    again = containers.run_playbook(inventory, PLAYBOOK, extra)
    assert again.returncode == 0 and "changed=0" in again.stdout, (again.stdout + again.stderr)[-4000:]
