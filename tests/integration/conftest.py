"""Fixtures shared by the integration tests: this machine's own llama.cpp build, and a tiny model."""

import json
from pathlib import Path

import docker
import pytest

from tests.tools import containers, llama_cpp, tiny_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def x86_build(tmp_path_factory):
    """llama.cpp for this machine, built by the llama_build role as the scenarios build it, and shared with them
    (tests/tools/llama_cpp.role_build): nothing is compiled twice for one target in a make test. Returns the bin
    directory."""
    return llama_cpp.role_build(tmp_path_factory.mktemp("role-build"))


@pytest.fixture(scope="session")
def model(tmp_path_factory):
    return tiny_model.write_model(tmp_path_factory.mktemp("model") / "tiny.gguf")


# The smallest cluster a role of the master's side can be tested on alone (make role ROLE=rpc_master, gateway, bench):
# a master and one worker, fresh systemd hosts, deployed by playbooks/deploy.yml with the kept build (no compile). The
# cluster scenario checks the same roles among the others, over SSH, on two clusters (make molecule SCENARIOS=cluster).
SMALL_NETWORK = "llama-rpc-alone"
SMALL_MASTER, SMALL_WORKER = "llama-alone-master", "llama-alone-worker"
SMALL_MODEL = "/srv/models/tiny.gguf"
SMALL_SERVER_KEY = "alone-test-key"  # a test key; a real one is in Vault


def small_cluster_inventory(directory, gateway=None, **group_vars):
    """The small cluster's inventory (and a gateway host when named), with its variables; returns its path."""
    def hosts(*names):
        return {"hosts": {name: {} for name in names}}
    groups = {"llama_master": hosts(SMALL_MASTER), "llama_workers": hosts(SMALL_WORKER)}
    if gateway:
        groups["llama_gateway"] = hosts(gateway)
    variables = dict(containers.archive_source_vars(), ansible_connection="community.docker.docker",
                     ansible_python_interpreter="auto_silent",
                     llama_build_controller_cache=str(llama_cpp.BUILD_CACHE / "artifacts"),
                     rpc_master_model_src=SMALL_MODEL, rpc_master_context_size=512,
                     rpc_master_server_api_key=SMALL_SERVER_KEY, rpc_master_server_parallel=2, **group_vars)
    path = Path(directory) / "hosts.yml"
    path.write_text(json.dumps({"all": {"children": groups, "vars": variables}}))
    return path


@pytest.fixture(scope="session")
def small_cluster(x86_build, tmp_path_factory):
    """The master and its worker, deployed. Yields (hosts by name, the inventory's directory, deploy.yml's output)."""
    del x86_build  # asked for what it leaves behind: the kept build the deploy distributes (no compile)
    client = docker.from_env()
    # NET_ADMIN: the worker's nftables table
    hosts = {name: containers.start_host(client, name, SMALL_NETWORK, extra_caps=["NET_ADMIN"])
             for name in (SMALL_MASTER, SMALL_WORKER)}
    try:
        # Feed-forward matrices of 10.5 MiB: over llama.cpp's 10 MiB, so they travel by hash and fill the worker's cache
        model = tiny_model.write_model(tmp_path_factory.mktemp("small-model") / "tiny.gguf", embd=256, layers=4, ff=10752)
        master = hosts[SMALL_MASTER]
        assert containers.sh(master, f"mkdir -p {Path(SMALL_MODEL).parent}")[0] == 0
        master.put_archive(str(Path(SMALL_MODEL).parent), containers.tar_of(model, Path(SMALL_MODEL).name))
        directory = tmp_path_factory.mktemp("small-cluster")
        small_cluster_inventory(directory)
        deployed = containers.run_playbook(directory / "hosts.yml", ROOT / "playbooks" / "deploy.yml", {}, timeout=1200)
        assert deployed.returncode == 0, (deployed.stdout + deployed.stderr)[-5000:]
        yield hosts, directory, deployed.stdout
    finally:
        containers.remove(client, hosts.values(), SMALL_NETWORK)
