"""Benchmark: does our deployment cost speed, and what do -fit off and the worker cache buy?

On the cluster scenario's cluster (a master and two workers, brought up with Molecule if absent),
with a model of a few hundred MB made here, all measured side by side in one run:

1. generation tokens/s through our deployment (playbooks/infer.yml: the systemd workers, the module)
   vs the same binaries started by hand on the same containers (ggml-rpc-server in a shell on each
   worker, llama-completion with the same arguments on the master), alternating, median of --rounds;
2. model load time with -fit off (ours) vs llama.cpp's default -fit on (a sizing pass first);
3. model load time with the workers' tensor cache cold (emptied) vs warm.

Prints the figures and the ratios and writes them as JSON; it asserts nothing.

    python -m tests.bench.master [--rounds 3] [--layers 6] [--embd 1024] [--tokens 64]

Run through `make bench-master`.
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import docker

from tests.tools import containers, tiny_model
from tests.tools.llama_cpp import complete, perf

ROOT = Path(__file__).resolve().parents[2]
MASTER, WORKERS = "llama-master", ["llama-worker-1", "llama-worker-2"]
MODEL = "/srv/bench/bench.gguf"
BIN = "/opt/llama.cpp/current/bin"
WORKER_UNIT = "llama-rpc-worker@main.service"


def sh(container, command, detach=False):
    if detach:
        container.exec_run(["sh", "-c", command], detach=True)
        return ""
    return containers.checked_sh(container, command)


def cluster_inventory():
    """The scenario's inventory; converge the scenario first when its hosts are not there."""
    client = docker.from_env()
    if not all(client.containers.list(filters={"name": f"^{name}$"}) for name in [MASTER] + WORKERS):
        for action in ("create", "prepare", "converge"):
            subprocess.run(["molecule", action, "-s", "cluster"], cwd=ROOT, check=True)
    inventories = glob.glob(os.path.expanduser("~/.ansible/tmp/molecule.*.cluster/inventory/ansible_inventory.yml"))
    return client, inventories[0]


def deployed_run(inventory, results, extra):
    """One run of playbooks/infer.yml; returns its result (figures, command)."""
    before = set(glob.glob(f"{results}/infer-*.json"))
    run = containers.run_playbook(inventory, ROOT / "playbooks" / "infer.yml",
                                  dict({"rpc_master_model_src": MODEL, "rpc_master_model_sha256": "",
                                        "rpc_master_infer_results_dir": str(results)}, **extra), timeout=1800)
    if run.returncode:
        raise RuntimeError(run.stdout[-3000:])
    (new,) = set(glob.glob(f"{results}/infer-*.json")) - before
    return json.loads(Path(new).read_text())


class ByHand:
    """The manual flow on the same containers: the units stopped, ggml-rpc-server started in a shell."""

    def __init__(self, master, workers):
        self.master, self.workers = master, workers

    def __enter__(self):
        sh(self.master, "systemctl stop llama-server")
        for worker in self.workers:
            sh(worker, f"systemctl stop {WORKER_UNIT}")
            env = sh(worker, "cat /etc/llama-rpc-worker/main.env")
            settings = dict(line.split("=", 1) for line in env.splitlines() if "=" in line and not line.startswith("#"))
            # The same flags as the unit (address, port, threads, -c); a shell that ignores SIGPIPE, like systemd.
            sh(worker, f"trap '' PIPE; mkdir -p /tmp/hand-cache; LLAMA_CACHE=/tmp/hand-cache nohup {BIN}/ggml-rpc-server "
                       f"-H {settings['RPC_WORKER_HOST']} -p {settings['RPC_WORKER_PORT']} -t {settings['RPC_WORKER_THREADS']} "
                       f"{settings.get('RPC_WORKER_ARGS', '')} >/tmp/hand-worker.log 2>&1 &", detach=True)
        time.sleep(2)
        return self

    def run(self, command):
        """llama-completion by hand on the master; the figures from its log (retrying lost output)."""
        quoted = " ".join("'" + part.replace("'", "'\\''") + "'" for part in command)
        for _attempt in range(3):
            result = self.master.exec_run(["sh", "-c", f"GGML_NO_BACKTRACE=1 {quoted} 2>&1 >/dev/null"])
            log = result.output.decode("utf-8", "replace")
            if result.exit_code == 0 and complete(log):
                return perf(log)
        raise RuntimeError(f"llama-completion by hand failed: {result.output[-2000:]}")

    def __exit__(self, *exc):
        for worker in self.workers:
            worker.exec_run(["pkill", "-f", "ggml-rpc-server -H"])
            sh(worker, f"systemctl start {WORKER_UNIT}")
        sh(self.master, "systemctl start llama-server")


def with_fit(command, value):
    """The same command with -fit set to value."""
    index = command.index("-fit")
    return command[:index + 1] + [value] + command[index + 2:]


def ratio(numerator, denominator):
    return round(numerator / denominator, 3) if denominator else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--embd", type=int, default=1024)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()

    client, inventory = cluster_inventory()
    master = client.containers.get(MASTER)
    workers = [client.containers.get(name) for name in WORKERS]
    work = Path(tempfile.mkdtemp(prefix="bench-master-"))
    model = tiny_model.write_model(work / "bench.gguf", embd=args.embd, layers=args.layers, ff=4 * args.embd,
                                   heads=16, kv_heads=4, context=2048)
    size_mb = model.stat().st_size / 1e6
    sh(master, "mkdir -p /srv/bench")
    master.put_archive("/srv/bench", containers.tar_of(model))
    print(f"model: {size_mb:.0f} MB ({args.layers} layers, embedding {args.embd}), cluster: {MASTER} + {WORKERS}")
    extra = {"rpc_master_infer_tokens": args.tokens, "rpc_master_context_size": 512}

    first = deployed_run(inventory, work, extra)  # warms the workers' caches and the page cache
    command = first["command"]
    deployed, by_hand = [], []
    for round_index in range(args.rounds):
        deployed.append(deployed_run(inventory, work, extra)["figures"])
        with ByHand(master, workers) as hand:
            hand.run(command)  # the hand-started workers' own cache, warmed like the deployment's
            by_hand.append(hand.run(command))
        print(f"round {round_index + 1}: deployed {deployed[-1]['eval_tps']:.1f} tok/s, by hand {by_hand[-1]['eval_tps']:.1f} tok/s")

    fit_off, fit_on = [], []
    with ByHand(master, workers) as hand:
        hand.run(command)
        for _round in range(args.rounds):
            fit_off.append(hand.run(command)["load_ms"])
            fit_on.append(hand.run(with_fit(command, "on"))["load_ms"])

    cold, warm = [], []
    for _round in range(args.rounds):
        for worker in workers:
            sh(worker, f"systemctl stop {WORKER_UNIT}; rm -rf /var/cache/llama-rpc-worker/main/*; systemctl start {WORKER_UNIT}")
        time.sleep(1)
        cold.append(deployed_run(inventory, work, extra)["figures"]["load_ms"])
        warm.append(deployed_run(inventory, work, extra)["figures"]["load_ms"])

    median = statistics.median
    figures = {
        "model_mb": round(size_mb), "rounds": args.rounds, "tokens": args.tokens,
        "generation_tps": {"deployed": median(d["eval_tps"] for d in deployed), "by_hand": median(h["eval_tps"] for h in by_hand)},
        "load_ms": {"fit_off": median(fit_off), "fit_on": median(fit_on), "cache_cold": median(cold), "cache_warm": median(warm)},
        "samples": {"deployed": deployed, "by_hand": by_hand, "fit_off": fit_off, "fit_on": fit_on, "cold": cold, "warm": warm},
    }
    figures["ratios"] = {
        "deployed_vs_by_hand_generation": ratio(figures["generation_tps"]["deployed"], figures["generation_tps"]["by_hand"]),
        "load_fit_off_vs_fit_on": ratio(figures["load_ms"]["fit_off"], figures["load_ms"]["fit_on"]),
        "load_cache_warm_vs_cold": ratio(figures["load_ms"]["cache_warm"], figures["load_ms"]["cache_cold"]),
    }
    (work / "bench-master.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps({key: figures[key] for key in ("generation_tps", "load_ms", "ratios")}, indent=2))
    print(f"all figures: {work / 'bench-master.json'}")


if __name__ == "__main__":
    main()
