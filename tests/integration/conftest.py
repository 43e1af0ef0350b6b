"""Fixtures shared by the integration tests: this machine's own llama.cpp build, and a tiny model."""

import hashlib
import json
import shutil
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
# model comes as a three-part set from a model host on the master's loopback that wants a token, as from Hugging Face
# (tests/tools/model_server.py), so that updates and rollbacks of a served model are tested on it. The cluster scenario
# checks the same roles among the others, over SSH, on two clusters (make molecule SCENARIOS=cluster).
SMALL_NETWORK = "llama-rpc-alone"
SMALL_MASTER, SMALL_WORKER = "llama-alone-master", "llama-alone-worker"
SMALL_MODEL = "/srv/models/tiny.gguf"  # the same tensors as one file: what the master alone runs to compare tokens with
SMALL_SOURCE = "http://127.0.0.1:8000"  # the model host: /srv/model-source on the master
SMALL_MODEL_TOKEN = "alone-model-token"  # a test token; a real one is in Vault
SMALL_SERVER_KEY = "alone-test-key"  # a test key; a real one is in Vault
SMALL_WAKE_PORT = 8091  # the master's wake socket (the gateway's wake of a stopped cluster)
# Feed-forward matrices of 10.5 MiB: over llama.cpp's 10 MiB, so they travel by hash and fill the worker's cache.
SMALL_SHAPE = {"embd": 256, "layers": 4, "ff": 10752}
SMALL_SPLIT = 50_000_000  # three parts
SMALL_MASTER_PATCHES = ("rpc_known_hashes", "rpc_tensor_parallel")  # tensor mode: the master's share on it


def small_model_source(directory):
    """The model host's directory: the set and its checksum file; in v2/ new bytes under the same names (an update of
    the served model), in other/ a four-part upload of another model, whose third part is also there under the set's
    name for its part 3; in reshaped/ a model of narrower feed-forward layers split the same way (its part 3 holds the
    same tensors by name, of other shapes: the collection's reading of the headers accepts it beside the set's parts 1
    and 2, llama.cpp does not). Returns the directory."""
    source = directory / "model-source"
    for sub, seed, split, shape in (("", 42, SMALL_SPLIT, SMALL_SHAPE), ("v2", 7, SMALL_SPLIT, SMALL_SHAPE),
                                    ("other", 9, 36_000_000, SMALL_SHAPE),
                                    ("reshaped", 11, SMALL_SPLIT, dict(SMALL_SHAPE, ff=SMALL_SHAPE["ff"] - 256))):
        (source / sub).mkdir(parents=True, exist_ok=True)
        first = tiny_model.write_model(source / sub / "tiny.gguf", seed=seed, split_max_size=split, **shape)
        parts = sorted(first.parent.glob(first.name.replace("-00001-", "-0000?-")))
        (source / sub / "SHA256SUMS").write_text("".join(
            "%s  %s\n" % (hashlib.sha256(part.read_bytes()).hexdigest(), part.name) for part in parts))
    foreign = sorted((source / "other").glob("tiny-0000?-of-0000*.gguf"))
    assert len(foreign) == 4, foreign
    shutil.copyfile(foreign[2], source / "other" / "tiny-00003-of-00003.gguf")
    return source


def serve_model_source(master):
    """The model host on the master's loopback (tests/tools/model_server.py), started unless it runs: a transient
    unit, gone when the container restarts."""
    if containers.sh(master, "systemctl is-active model-source")[1].strip() != "active":
        containers.checked_sh(master, "systemctl reset-failed model-source 2>/dev/null; systemd-run --unit model-source "
                                      f"python3 /usr/local/lib/model_server.py /srv/model-source --port 8000 "
                                      f"--token {SMALL_MODEL_TOKEN}")


def small_cluster_inventory(directory, gateway=None, **group_vars):
    """The small cluster's inventory (and a gateway host when named), with its variables; returns its path."""
    def hosts(*names):
        return {"hosts": {name: {} for name in names}}
    groups = {"llama_master": hosts(SMALL_MASTER), "llama_workers": hosts(SMALL_WORKER)}
    # the master's build sends the record's hashes and fills its workers at once (its starts and updates tested so)
    groups["llama_master"]["hosts"][SMALL_MASTER]["llama_build_patches"] = list(SMALL_MASTER_PATCHES)
    if gateway:
        groups["llama_gateway"] = hosts(gateway)
    variables = dict(containers.archive_source_vars(), ansible_connection="community.docker.docker",
                     ansible_python_interpreter="auto_silent",
                     llama_build_controller_cache=str(llama_cpp.BUILD_CACHE / "artifacts"),
                     rpc_master_model_src=SMALL_SOURCE + "/tiny-00001-of-00003.gguf",
                     rpc_master_model_sha256sums=SMALL_SOURCE + "/SHA256SUMS", rpc_master_model_token=SMALL_MODEL_TOKEN,
                     rpc_master_context_size=512, rpc_master_server_api_key=SMALL_SERVER_KEY, rpc_master_server_parallel=2,
                     rpc_master_wake_port=SMALL_WAKE_PORT, **group_vars)
    path = Path(directory) / "hosts.yml"
    path.write_text(json.dumps({"all": {"children": groups, "vars": variables}}))
    return path


@pytest.fixture(scope="session")
def small_cluster(x86_build, tmp_path_factory):
    """The master and its worker, deployed. Yields (hosts by name, the inventory's directory, deploy.yml's output)."""
    del x86_build  # asked for what it leaves behind: the kept build the deploy distributes (no compile)
    # and the master's patched build, kept beside it (compiled in the build cache's container: only what the patch
    # changes), which the deploy distributes too
    llama_cpp.role_build(tmp_path_factory.mktemp("master-build"), patches=list(SMALL_MASTER_PATCHES))
    client = docker.from_env()
    # NET_ADMIN: the worker's nftables table
    hosts = {name: containers.start_host(client, name, SMALL_NETWORK, extra_caps=["NET_ADMIN"])
             for name in (SMALL_MASTER, SMALL_WORKER)}
    try:
        work = tmp_path_factory.mktemp("small-model")
        model = tiny_model.write_model(work / "tiny.gguf", **SMALL_SHAPE)
        source = small_model_source(work)
        master = hosts[SMALL_MASTER]
        containers.checked_sh(master, f"mkdir -p {Path(SMALL_MODEL).parent} /srv/model-source/v2 /srv/model-source/other "
                                      "/srv/model-source/reshaped")
        master.put_archive(str(Path(SMALL_MODEL).parent), containers.tar_of(model, Path(SMALL_MODEL).name))
        for path in source.rglob("*"):
            if path.is_file():
                master.put_archive(str(Path("/srv/model-source") / path.parent.relative_to(source)), containers.tar_of(path))
        master.put_archive("/usr/local/lib", containers.tar_of(ROOT / "tests" / "tools" / "model_server.py"))
        serve_model_source(master)
        directory = tmp_path_factory.mktemp("small-cluster")
        small_cluster_inventory(directory)
        deployed = containers.run_playbook(directory / "hosts.yml", ROOT / "playbooks" / "deploy.yml", {}, timeout=1200)
        assert deployed.returncode == 0, (deployed.stdout + deployed.stderr)[-5000:]
        yield hosts, directory, deployed.stdout
    finally:
        containers.remove(client, hosts.values(), SMALL_NETWORK)
