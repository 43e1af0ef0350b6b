"""make families: the architecture families people split across machines (tests/tools/model_shapes.SMALL: dense LLaMA,
Qwen3-MoE, gpt-oss's alternating sliding window and sinks, Gemma 3's 5:1 window and tied embeddings, DeepSeek's MLA
and MTP layer, Qwen3-Next's recurrent layers), each a small model of its real tensor set and metadata, deployed on the
local cluster with playbooks/deploy.yml as a user deploys a model: once fully offloaded, once partly (with a
rpc_master_memory_fraction small enough that the master keeps layers, found with gguf_plan against the live workers).

For each deploy: the plan rpc_master saved against the buffers llama.cpp logged on each worker and the master in the
deploy's one-shot inference (tests/tools/plan_check.py: weights within 1%, caches within 2%, compute not below and
within 15%), and the tokens it generated greedily over the workers against the master's alone. Prints every figure;
exits non-zero when a bound or a token differs.

    python -m demo.families DEMO_DIR VARS_FILE
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import docker

from demo import cluster
from tests.tools import model_shapes, plan_check

ROOT = Path(__file__).resolve().parents[1]
MASTER = cluster.names()[0]
PROMPT = "Once upon a time"
TOKENS = 12
CONTEXT = 1024
# One slot of CONTEXT tokens (the one-shot inference's KV cache is then the server's), no prompt cache on the master
# (the partial layouts leave it little memory), greedy.
SETTINGS = {"rpc_master_context_size": CONTEXT, "rpc_master_server_parallel": 1, "rpc_master_server_cache_ram_mib": 0,
            "rpc_master_infer": True, "rpc_master_infer_prompt": PROMPT, "rpc_master_infer_tokens": TOKENS,
            "rpc_master_infer_temperature": 0, "rpc_master_model_sha256": "", "rpc_master_model_sha256sums": ""}


def on_master(command):
    result = docker.from_env().containers.get(MASTER).exec_run(["sh", "-c", command], demux=True)
    stdout, stderr = result.output
    return result.exit_code, stdout or b"", (stderr or b"").decode("utf-8", "replace")


def master_alone(bin_dir, path):
    """Greedy on the master alone, decoded as llama_infer decodes the one-shot inference's text."""
    from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import llama_log  # pylint: disable=import-outside-toplevel
    for _attempt in range(6):  # llama-completion loses its last output lines in about 5% of runs
        code, out, log = on_master(f"GGML_NO_BACKTRACE=1 {bin_dir}/llama-completion -m {path} -p '{PROMPT}' -n {TOKENS} "
                                   f"--temp 0 --seed 42 -c {CONTEXT} -no-cnv --no-display-prompt -fit off -lv 4")
        if code == 0 and llama_log.complete(log) and out:
            return out.decode("utf-8", errors="replace")
    raise RuntimeError(f"llama-completion on the master alone failed: {log[-2000:]}")


def module_on_master(name, args):
    """One module on the master through ansible (the JSON callback), as rpc_master runs it."""
    env = dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json")
    run = subprocess.run(["ansible", "-i", "inventories/local", MASTER, "-m", name, "-a", json.dumps(args)],
                         capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    return json.loads(run.stdout)["plays"][0]["tasks"][0]["hosts"][MASTER]


def deploy(vars_file, results, extra):
    results.mkdir(parents=True, exist_ok=True)
    command = ["ansible-playbook", "-i", "inventories/local", "playbooks/deploy.yml", "--tags", "rpc_master",
               "-e", f"@{vars_file}", "-e", json.dumps(dict(SETTINGS, rpc_master_infer_results_dir=str(results), **extra))]
    started = time.monotonic()
    run = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    (results / "deploy.log").write_text(run.stdout + run.stderr)
    if run.returncode != 0:
        raise RuntimeError(f"deploy.yml failed ({results / 'deploy.log'}): {run.stdout[-3000:]}")
    result = json.loads(sorted(results.glob("infer-*.json"))[-1].read_text())
    return result, time.monotonic() - started


def partial_fraction(bin_dir, path, workers):
    """A rpc_master_memory_fraction at which gguf_plan, against the live workers, puts layers on the master and on the
    workers (bisected on a log scale between a fraction nothing fits in and one that holds it all)."""
    on_master("systemctl stop llama-server-watchdog llama-server")
    probed = module_on_master("graviton.llama_rpc.rpc_probe", {"workers": workers, "fail_unless_all_ok": True})["workers"]
    low, high = 1e-6, 0.75
    for _step in range(24):
        middle = (low * high) ** 0.5
        result = module_on_master("graviton.llama_rpc.gguf_plan", {
            "path": path, "workers": probed, "context_size": CONTEXT, "slots": 1, "memory_fraction": middle,
            "master_reserved_bytes": 0, "projection": {"program": f"{bin_dir}/llama-fit-params", "flash_attn": "auto"}})
        if result.get("failed"):
            low = middle
        elif not result["plan"]["master_carries_layers"]:
            high = middle
        else:
            return round(middle, 8)
    raise RuntimeError(f"no fraction between {low} and {high} splits {path} between the master and the workers")


def main(demo_dir, vars_file):
    work = Path(demo_dir) / "families"
    master = docker.from_env().containers.get(MASTER)
    build = json.loads(on_master("cat /etc/ansible/facts.d/llama_rpc_build.fact")[1])
    workers = on_master("cat /etc/llama-rpc/workers")[1].decode().strip().split(",")
    problems, rows = [], []
    (work / "models").mkdir(parents=True, exist_ok=True)
    for arch in sorted(model_shapes.SMALL):
        local = model_shapes.small(arch, work / "models" / f"{arch}.gguf")[0]
        path = f"/srv/models/families/{arch}.gguf"
        cluster.place_model(master, local, path)
        alone = master_alone(build["bin_dir"], path)
        for layout in ("full", "partial"):
            extra = {"rpc_master_model_src": path}
            if layout == "partial":
                extra["rpc_master_memory_fraction"] = partial_fraction(build["bin_dir"], path, workers)
            result, seconds = deploy(vars_file, work / "results" / f"{arch}-{layout}", extra)
            plan = result["plan"]
            split = plan["master_carries_layers"] and 0 < plan["n_gpu_layers"] < 999
            if split != (layout == "partial"):
                problems.append(f"{arch} {layout}: -ngl {plan['n_gpu_layers']}, the master carries layers: "
                                f"{plan['master_carries_layers']}")
            problems += plan_check.compare(plan, result["buffers"], f"{arch} {layout}")
            same = result["text"] == alone
            if not same:
                problems.append(f"{arch} {layout}: over the workers {result['text']!r}, on the master alone {alone!r}")
            rows.append((arch, layout, plan["n_gpu_layers"], extra.get("rpc_master_memory_fraction", 0.75), same, seconds))
    print("\n| family | layout | -ngl | memory fraction | tokens = master alone | deploy.yml (s) |")
    print("|---|---|---:|---:|---|---:|")
    for arch, layout, ngl, fraction, same, seconds in rows:
        print(f"| {arch} | {layout} | {ngl} | {fraction:g} | {'yes' if same else 'NO'} | {seconds:.0f} |")
    if problems:
        print("\n".join(["", "FAILED:"] + problems))
        return 1
    print(f"\n{len(rows)} deploys: every plan within the bounds of llama.cpp's buffers, every token the master's alone.")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
