"""Benchmark: does a group of identical hosts cost one compile?

Runs the llama_build role on 1 fresh host, then on N fresh identical hosts, each time with an empty
compiler cache and an empty controller cache, and measures the CPU-seconds all hosts consumed
(Docker's cumulative per-container CPU counter: package installs, Ansible's modules and the compile),
the wall time, and a re-run's wall time. Prints the figures and the ratios; it asserts nothing.

    python -m tests.bench.build_once [--hosts 3] [--targets ggml-rpc-server]

Run through `make bench-build` (the test bed's environment: images, venv, collection path).
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import docker

from tests.tools import containers

PLAYBOOK = Path(__file__).resolve().parents[1] / "playbooks" / "llama_build.yml"
NETWORK = "llama-rpc-bench"


def cpu_seconds(container):
    return container.stats(stream=False)["cpu_stats"]["cpu_usage"]["total_usage"] / 1e9


def run_play(inventory, extra_vars, log):
    """Run the play, append its output to log, return its wall time in seconds."""
    started = time.monotonic()
    result = containers.run_playbook(inventory, PLAYBOOK, extra_vars, timeout=7200)
    with open(log, "a") as out:
        out.write(result.stdout + result.stderr)
    if result.returncode:
        raise RuntimeError(f"the play failed, see {log}")
    return time.monotonic() - started


def measure(client, count, targets, workdir):
    names = [f"llama-bench-{count}-{index}" for index in range(count)]
    ccache_dir = workdir / f"ccache-{count}"
    ccache_dir.mkdir()
    inventory = containers.inventory(workdir / f"hosts-{count}.ini", names)
    extra_vars = dict(containers.archive_source_vars(), llama_build_targets=targets,
                      llama_build_controller_cache=str(workdir / f"controller-cache-{count}"))
    hosts = [containers.start_host(client, name, NETWORK, volumes={str(ccache_dir): {"bind": "/var/cache/llama.cpp/ccache", "mode": "rw"}})
             for name in names]
    try:
        before = sum(cpu_seconds(c) for c in hosts)
        first_wall = run_play(inventory, extra_vars, workdir / f"play-{count}.log")
        used = sum(cpu_seconds(c) for c in hosts) - before
        rerun_wall = run_play(inventory, extra_vars, workdir / f"play-{count}.log")
        record = json.loads(containers.read_file(hosts[0], "/opt/llama.cpp/current/build-record.json"))
        return {"hosts": count, "host_cpu_seconds": round(used, 1), "compile_cpu_seconds": record["compile"]["cpu_seconds"],
                "first_wall_seconds": round(first_wall, 1), "rerun_wall_seconds": round(rerun_wall, 1)}
    finally:
        containers.remove(client, hosts, NETWORK)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--targets", nargs="+", default=["ggml-rpc-server"],
                        help="what to compile (default: the worker only, to keep a cold compile short)")
    args = parser.parse_args()
    client = docker.from_env()
    with tempfile.TemporaryDirectory(prefix="llama-rpc-bench-") as tmp:
        workdir = Path(tmp)
        rows = [measure(client, count, args.targets, workdir) for count in (1, args.hosts)]
    one, many = rows
    print(f"\nllama_build, targets {' '.join(args.targets)}, cold compiler cache each time")
    print(f"{'hosts':>5} {'host CPU s':>11} {'compile CPU s':>14} {'first run s':>12} {'re-run s':>9}")
    for row in rows:
        print(f"{row['hosts']:>5} {row['host_cpu_seconds']:>11} {row['compile_cpu_seconds']:>14} "
              f"{row['first_wall_seconds']:>12} {row['rerun_wall_seconds']:>9}")
    print(f"CPU-seconds, {many['hosts']} hosts vs 1: {many['host_cpu_seconds'] / one['host_cpu_seconds']:.2f} (target <= 1.2)")
    for row in rows:
        print(f"re-run vs first run, {row['hosts']} host(s): {row['rerun_wall_seconds'] / row['first_wall_seconds']:.2f}")


if __name__ == "__main__":
    main()
