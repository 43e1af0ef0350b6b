"""The plan against what llama.cpp really allocates, for each architecture family people split across machines (dense
LLaMA, Qwen3-MoE, gpt-oss's alternating sliding window and sinks, Gemma 3's 5:1 window and tied embeddings, DeepSeek's
MLA and MTP layer, Qwen3-Next's recurrent layers), on cluster_a's master and two workers.

Each family is a small model of its real tensor set and metadata with random weights (tests/tools/model_shapes.py).
gguf_plan runs on the master as rpc_master runs it (llama.cpp's projection against the live workers), once with the
workers' real memory (every layer offloaded) and once with workers stated small enough that the master keeps layers;
then llama-completion loads the model with the plan's -ngl and -ts, and the buffers llama.cpp logs per device are set
against the plan: weights within 1%, caches within 2% (the collection's own figures), compute buffers not below
llama.cpp's and within 15% or 2.5 MiB (the plan's come from llama.cpp's projection, which rounds up to the MiB). Greedy tokens over the workers equal the
master's alone. llama-server is stopped meanwhile (a worker serves one client) and started again after."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import testinfra.utils.ansible_runner

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
sys.path.insert(0, str(ROOT))
from tests.tools import collection, llama_cpp, model_shapes, plan_check  # noqa: E402  pylint: disable=wrong-import-position

collection.importable()
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import llama_log  # noqa: E402  pylint: disable=wrong-import-position

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
testinfra_hosts = RUNNER.get_hosts("cluster_a_master")
CONTEXT = 1024
PROMPT = "Once upon a time"
FAMILIES = sorted(model_shapes.SMALL)


def module(host, name, **args):
    result = host.ansible(name, json.dumps(args), check=False, become=True)
    assert not result.get("failed"), result.get("msg", result)
    return result


def completion(host, bin_dir, path, workers, plan=None, tokens=12):
    """llama-completion greedy, over the workers with the plan's -ngl/-ts, or on the master alone: (the generated
    bytes, the log). Random weights generate bytes that are not text: they are compared as bytes."""
    rpc = (f"--rpc {','.join(workers)} -ngl {plan['n_gpu_layers']} -ts {','.join(map(str, plan['tensor_split']))}"
           if plan else "")
    command = llama_cpp.greedy_command(bin_dir, path, PROMPT, tokens, f"{rpc} -c {CONTEXT} -lv 4")

    def once():
        code = host.run(f"{command} >/tmp/family.out 2>/tmp/family.log").rc
        log = host.file("/tmp/family.log").content.decode("utf-8", "replace")
        return code, log, (code, log)
    code, log = llama_cpp.until_complete(once)
    if code != 0 or not llama_log.complete(log):
        raise AssertionError(f"llama-completion failed: {code} {log[-2000:]}")
    return host.file("/tmp/family.out").content[len(PROMPT):], log


@pytest.fixture(scope="module")
def cluster(host, tmp_path_factory):
    """The families' models on the master, the workers free (llama-server stopped), the build's bin directory and the
    workers' endpoints with their memory as rpc_probe reports it."""
    directory = tmp_path_factory.mktemp("families")
    host.check_output("mkdir -p /srv/families")
    for arch in FAMILIES:
        path = model_shapes.small(arch, directory / f"{arch}.gguf")[0]
        subprocess.run(["docker", "cp", str(path), f"{host.backend.get_hostname()}:/srv/families/{arch}.gguf"], check=True)
    bin_dir = json.loads(host.file("/etc/ansible/facts.d/llama_rpc_build.fact").content_string)["bin_dir"]
    workers = host.file("/etc/llama-rpc/workers").content_string.strip().split(",")
    host.check_output("systemctl stop llama-server-watchdog llama-server")
    try:
        probe = module(host, "graviton.llama_rpc.rpc_probe", workers=workers, fail_unless_all_ok=True)
        yield bin_dir, workers, probe["workers"]
    finally:
        host.check_output("systemctl start llama-server llama-server-watchdog")
        host.run("rm -rf /srv/families /tmp/family.log /tmp/family.out")
        # serving again before the next tests (the gateway's checks take a cluster out while it loads)
        health = llama_cpp.server_url(host.file(llama_cpp.SERVER_ENV).content_string) + "/health"
        probe = f"python3 -c 'import urllib.request; urllib.request.urlopen(\"{health}\", timeout=5)'"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and host.run(probe).rc != 0:
            time.sleep(1)
        time.sleep(10)  # the gateway's health checks see it up again (its fall/rise bound: tests/test_gateway.py)


def plan(host, bin_dir, arch, probed):
    return module(host, "graviton.llama_rpc.gguf_plan", path=f"/srv/families/{arch}.gguf", workers=probed,
                  context_size=CONTEXT, projection={"program": f"{bin_dir}/llama-fit-params"})["plan"]


def set_against(planned, log, arch, layout):
    """The plan's figures per node against llama.cpp's logged buffers (tests/tools/plan_check.py); prints them."""
    problems = plan_check.compare(planned, llama_log.buffers(log), f"{arch} {layout}")
    assert not problems, problems


@pytest.mark.parametrize("arch", FAMILIES)
def test_the_plan_is_what_llama_cpp_allocates_and_the_tokens_are_the_master_alones(host, cluster, arch):
    bin_dir, workers, probed = cluster
    path = f"/srv/families/{arch}.gguf"
    alone, _log = completion(host, bin_dir, path, workers)
    full = plan(host, bin_dir, arch, probed)
    assert full["n_gpu_layers"] == 999 and not full["master_carries_layers"] and full["figures"] == "llama.cpp", full
    text, log = completion(host, bin_dir, path, workers, full)
    set_against(full, log, arch, "full")
    assert text == alone, (arch, text, alone)
    # workers stated with room for their caches, compute buffers and half their weights: the master keeps layers
    small = []
    for worker, node in zip(probed, full["workers"]):
        total = int((node["need_bytes"] - node["weights_bytes"] / 2) / 0.75)
        small.append(dict(worker, devices=[{"index": 0, "free": total, "total": total}]))
    partial = plan(host, bin_dir, arch, small)
    assert partial["master_carries_layers"] and 0 < partial["n_gpu_layers"] < 999, partial
    text, log = completion(host, bin_dir, path, workers, partial)
    set_against(partial, log, arch, "partial")
    assert text == alone, (arch, text, alone)
