"""Benchmark: when the master reads the model from its disk, and how often, in a load through a worker.

llama.cpp maps the model with MAP_POPULATE after POSIX_FADV_SEQUENTIAL (src/llama-mmap.cpp): the mmap call itself
reads the whole file, before the loader sends its first tensor. The load-time model (plugins/module_utils/plan/load_time.py)
charges the master's disk once, tensor by tensor. This measures, on this machine, one load of a model through one
worker whose tensor cache already holds it (so the worker's part is small and the same each time), in three states of
the master's page cache: holding the file, dropped, and dropped with the page cache the load may use capped below the
file (a memory cgroup). The worker's cache files are in the page cache each time, so the disk serves the master alone.
For each: the mmap call's time (strace), llama.cpp's load time, and the bytes the disk delivered. Prints the table;
asserts nothing. Needs root (it drops the page cache) and the cgroup memory controller.

    python -m tests.bench.master_read [--size-gb 2] [--caps-gb 1,1.5]

Run through `make bench-master-read`.
"""

import argparse
import os
import re
import subprocess
import tempfile
from pathlib import Path

from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import llama_log
from tests.bench.load import Worker
from tests.tools import llama_cpp, tiny_model


def disk_bytes_read():
    """Bytes read from every whole disk since boot (/proc/diskstats: sectors of 512 bytes; partitions left out)."""
    total = 0
    for line in Path("/proc/diskstats").read_text().splitlines():
        fields = line.split()
        if Path(f"/sys/block/{fields[2]}").exists():
            total += int(fields[5]) * 512
    return total


def drop_page_cache():
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


class MemoryCap:
    """A memory cgroup (v2, or v1's memory controller) that charges the page cache its processes fill."""

    def __init__(self, limit_bytes):
        self.limit = limit_bytes
        v2 = Path("/sys/fs/cgroup/cgroup.controllers")
        if v2.exists() and "memory" in v2.read_text().split():
            self.path, self.limit_file = Path("/sys/fs/cgroup/llama-rpc-bench-master-read"), "memory.max"
        else:
            self.path, self.limit_file = Path("/sys/fs/cgroup/memory/llama-rpc-bench-master-read"), "memory.limit_in_bytes"

    def __enter__(self):
        self.path.mkdir(exist_ok=True)
        (self.path / self.limit_file).write_text(f"{self.limit}\n")
        return self

    def prefix(self):
        """A shell prefix that moves the command into the cgroup before it starts."""
        return f"echo $$ > {self.path}/cgroup.procs && exec "

    def __exit__(self, *exc):
        self.path.rmdir()


def load(bin_dir, model, endpoint, work, cap=None):
    """One load through the worker under strace: (mmap seconds, llama.cpp's load ms, bytes the disks delivered)."""
    trace = work / "mmap.strace"
    command = (f"strace -f -e trace=mmap -T -o {trace} {bin_dir}/llama-completion -m {model} --rpc {endpoint} -ngl 999 "
               "-fit off -n 1 -p Hello -no-cnv -c 256 -t 1")
    before = disk_bytes_read()
    run = subprocess.run(["sh", "-c", (cap.prefix() if cap else "exec ") + command], capture_output=True,
                         env=dict(os.environ, GGML_NO_BACKTRACE="1"), check=False)
    delivered = disk_bytes_read() - before
    log = run.stderr.decode("utf-8", "replace")
    if run.returncode or not llama_log.complete(log):
        raise RuntimeError(f"llama-completion failed: {log[-2000:]}")
    populate = [float(found) for found in re.findall(r"MAP_POPULATE.*<([\d.]+)>", trace.read_text())]
    if len(populate) != 1:
        raise RuntimeError(f"expected one mmap with MAP_POPULATE (the model), found {len(populate)}")
    return populate[0], llama_log.perf(log)["load_ms"], delivered


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=2.0)
    parser.add_argument("--caps-gb", default="1,1.5", help="page-cache caps below the file, GB")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-master-read-", dir=os.environ.get("LLAMA_RPC_BENCH_DIR", "/var/tmp")))
    from ansible_collections.graviton.llama_rpc.plugins.module_utils.host.cpu_flags import describe_cpu
    cpu = describe_cpu(Path("/proc/cpuinfo").read_text(), "x86_64")
    bin_dir = llama_cpp.build("x86_64", cpu["cmake_args"], ["ggml-rpc-server", "llama-completion"])
    embd = 2048
    layers = max(1, round(args.size_gb * 1e9 / (4 * (4 * embd * embd + 3 * embd * 4 * embd))))
    model = tiny_model.write_model(work / "model.gguf", embd=embd, layers=layers, ff=4 * embd, heads=16, kv_heads=16)
    size = model.stat().st_size
    rows = []
    with Worker(bin_dir, work / "cache") as worker:
        endpoint = f"127.0.0.1:{worker.port}"
        load(bin_dir, model, endpoint, work)  # fills the worker's cache: every load below is a hit
        cases = [("the file in the page cache", False, None), ("page cache dropped", True, None)]
        cases += [(f"dropped, page cache capped at {cap:g} GB", True, int(cap * 1e9))
                  for cap in (float(cap) for cap in args.caps_gb.split(","))]
        for name, drop, cap in cases:
            worker.wait_for_memory_back()
            if not drop:
                subprocess.run(["cat", str(model)], stdout=subprocess.DEVNULL, check=True)
            else:
                drop_page_cache()
                # the worker's cache files back in the page cache: the disk then serves the master alone
                subprocess.run(["sh", "-c", f"cat {worker.cache}/* > /dev/null"], check=True)
            if cap:
                with MemoryCap(cap) as capped:
                    rows.append((name,) + load(bin_dir, model, endpoint, work, capped))
            else:
                rows.append((name,) + load(bin_dir, model, endpoint, work))
            print(f"{name}: done", flush=True)
    print(f"\nmake bench-master-read: a {size / 1e9:.2f} GB model ({layers} layers) through one worker whose cache holds it")
    print("| master's page cache | mmap (MAP_POPULATE) s | load ms | read from disk, GB | times the file |")
    print("|---|---:|---:|---:|---:|")
    for name, populate, load_ms, delivered in rows:
        print(f"| {name} | {populate:.2f} | {load_ms:.0f} | {delivered / 1e9:.2f} | {delivered / size:.2f} |")
    subprocess.run(["rm", "-rf", str(work)], check=True)


if __name__ == "__main__":
    main()
