"""Benchmark: a stopped cluster's start, side by side: the stock master, the hash-ahead build and the known-hashes build.

A start finds every page cache empty: the master reads the model from its disk, each worker its cache files from its
own. Here, on this machine's loopback: llama.cpp built by the llama_build role (stock, llama_build_patches:
[rpc_hash_ahead] and [rpc_known_hashes]), two stock ggml-rpc-server -c workers whose caches a first (cold) load filled,
and the record of the tensor hashes written by the collection's own module (gguf_tensor_hashes). Before each start the
page cache of the model file and of every cache file is dropped (posix_fadvise DONTNEED), so their reads come from the
disk. For each model size and each master: the wall time of llama-completion from its start to its end after one token, the
load's own time, the bytes of the model file the master read (its page-cache residency after the load: fincore), and
the load-time model's prediction beside the load, with this run's constants (the disk's read rate among them, and the
disk as a real worker reads its cache files on a hit; the master and both workers share this machine's cores and its
one disk, and the prediction says so). Prints the figures;
asserts nothing.

    python -m tests.bench.start [--sizes-gb 1,3,6] [--embd 4096]

Run through `make bench-start`.
"""

import argparse
import json
import mmap
import os
import re
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import gguf
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import llama_log, tensor_cache
from ansible_collections.graviton.llama_rpc.plugins.module_utils.plan import load_time
from tests.bench.load import TOOL_SOURCE, Worker, cpu_seconds, hash_rate, module, page_cache_rate, proc_numbers, \
    raw_tcp_rate, worker_path_rate
from tests.tools import llama_cpp, tiny_model
from tests.tools.page_cache import drop, resident


def disk_read_rate(path):
    """The disk's read rate here: a file's page cache dropped, then read whole, bytes per second."""
    subprocess.run(["sync"], check=True)
    drop(path)
    began = time.monotonic()
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
    return os.path.getsize(path) / (time.monotonic() - began)


def populate_rate(path):
    """The master's read of a model out of its page cache, as llama.cpp's loader does it (mmap with MAP_POPULATE): the
    file's page cache dropped, bytes per second."""
    subprocess.run(["sync"], check=True)
    drop(path)
    with open(path, "rb") as handle:
        began = time.monotonic()
        with mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ, flags=mmap.MAP_PRIVATE | mmap.MAP_POPULATE):
            seconds = time.monotonic() - began
    return os.path.getsize(path) / seconds


def worker_rates(paths_tool, path, work):
    """The worker's own work per byte on a hit at this footprint (the file in the page cache), and its read of a cache
    file out of the page cache as the worker does it (the same path over the file dropped): the disk's rate as the
    worker sees it, what is left once the hit's own work is taken out."""
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
    hit = worker_path_rate(paths_tool, "hit", path, work)
    cold = []
    for _round in range(2):
        subprocess.run(["sync"], check=True)
        drop(path)
        cold.append(float(subprocess.run([paths_tool, "hit", str(path), str(128 << 20)], capture_output=True, text=True,
                                         check=True).stdout))
    cold_rate = statistics.median(cold)
    return hit, (1 / (1 / cold_rate - 1 / hit)) if cold_rate < hit else float("inf")


def files_read_rate(paths):
    """Bytes per second of reading each file whole into a fresh buffer, one after another, as a worker reads its cache
    files on a hit: (with their page cache dropped, with it holding them)."""
    def once():
        began, total = time.monotonic(), 0
        for path in paths:
            size = os.path.getsize(path)
            with open(path, "rb", buffering=0) as handle:
                total += handle.readinto(bytearray(size))
        return total / (time.monotonic() - began)
    subprocess.run(["sync"], check=True)
    for path in paths:
        drop(path)
    dropped = once()
    return dropped, once()


# Which page caches a start finds empty: every one (a start after a stop), and each side's alone, which separates the
# master's reads of the model from the workers' reads of their cache files when the prediction misses.
CONDITIONS = {
    "dropped": {"model": False, "caches": False},
    "caches-held": {"model": False, "caches": True},
    "model-held": {"model": True, "caches": False},
}


MASTERS = ("stock", "hash-ahead", "known-hashes")


def chosen(parser, option, value, known):
    """The comma-separated names of value, each one of known, or the parser's error naming those that are not (before
    anything is built)."""
    names = value.split(",")
    unknown = [name for name in names if name not in known]
    if unknown:
        parser.error(f"{option}: {', '.join(unknown)} is not one of {', '.join(known)}")
    return names


def held_and_dropped(model, caches, condition):
    """The page caches as the condition has them: the held files read whole into it, the others dropped."""
    subprocess.run(["sync"], check=True)
    for paths, held in (([model], condition["model"]), (caches, condition["caches"])):
        for path in paths:
            if held:
                subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
            else:
                drop(path)


_LANE = re.compile(r"ggml_backend_rpc_load_finish: RPC\[[^]]+\]: .* in ([0-9.]+) s")


def lanes_seconds(log):
    """The known-hashes build's own account of its weights' load: the slowest lane's seconds (None for other builds)."""
    found = [float(seconds) for seconds in _LANE.findall(log)]
    return max(found) if found else None


def pages_reclaimed():
    """Pages the kernel has reclaimed since boot (/proc/vmstat pgsteal_*): memory pressure during a start, if it grows."""
    counts = (line.split() for line in Path("/proc/vmstat").read_text().splitlines())
    return sum(int(value) for name, value in counts if name.startswith("pgsteal_"))


def cpu_now(workers):
    """CPU-seconds used so far by each worker, then by the waited-for children (the masters this bench ran)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return [sum(cpu_seconds(worker.process.pid)) for worker in workers] + [children.ru_utime + children.ru_stime]


def preempted(pid):
    """Times the kernel took the core from a process's serving thread while it could still run (its involuntary
    context switches): it counts how often a worker waited for a core that another process held."""
    return proc_numbers(f"/proc/{pid}/status")["nonvoluntary_ctxt_switches"]


def together_read_rate(model, worker_files):
    """The disk's rate when the master's populate of the model and each worker's read of its cache files run at once,
    as a known-hashes start reads them, every page cache dropped: all their bytes over the time the last one ends."""
    subprocess.run(["sync"], check=True)
    for path in [model] + [path for files in worker_files for path in files]:
        drop(path)
    readers = [subprocess.Popen(["cat"] + [str(path) for path in files], stdout=subprocess.DEVNULL)
               for files in [[model]] + list(worker_files)]
    began = time.monotonic()
    for reader in readers:
        reader.wait()
    total = os.path.getsize(model) + sum(os.path.getsize(path) for files in worker_files for path in files)
    return total / (time.monotonic() - began)


def solo_hit_rates(stock, known_master, model, record, hashed, work):
    """A real worker's cache hits over RPC, alone on this machine: bytes per second of the known-hashes lane that fills
    one worker holding the whole model (median of 2, after a load that fills it), (its cache files in its page cache,
    dropped). The workers' CPU with the files held matches the load's time: that rate is their work, not a wait; the
    rate with them dropped adds the worker's own reads of its files from the disk, one after another."""
    with Worker(stock, work / "solo") as worker:
        start(stock, model, [worker], {})
        caches = list(worker.cache.iterdir())
        rates = {True: [], False: []}
        for _round in range(2):
            for held in rates:
                worker.wait_for_memory_back()
                held_and_dropped(model, caches, {"model": False, "caches": held})
                _first_token, _load_s, log = start(known_master, model, [worker], {"GGML_RPC_HASH_RECORD": str(record)})
                rates[held].append(hashed / lanes_seconds(log))
    subprocess.run(["rm", "-rf", str(work / "solo")], check=True)
    return statistics.median(rates[True]), statistics.median(rates[False])


def fixed_work():
    """The machine's speed now: the fixed piece of work make test times (fixed_work in tests/bed/lib.sh), CPU-seconds."""
    lib = Path(__file__).resolve().parents[1] / "bed" / "lib.sh"
    return float(subprocess.run(["bash", "-c", '. "$1" && fixed_work', "fixed_work", str(lib)], capture_output=True,
                                text=True, check=True).stdout)


def start(bin_dir, model, workers, env):
    """One start: (seconds from the start of llama-completion to its end after one token, the load's seconds, the log)."""
    command = [str(bin_dir / "llama-completion"), "-m", str(model), "--rpc",
               ",".join(f"127.0.0.1:{worker.port}" for worker in workers), "-ngl", "999", "-fit", "off", "-n", "1",
               "-p", "Hello", "-no-cnv", "-lv", "4", "-c", "256", "-t", "1"]
    for _attempt in range(3):
        began = time.monotonic()
        run = subprocess.run(command, capture_output=True, env=dict(os.environ, GGML_NO_BACKTRACE="1", **env), check=False)
        wall = time.monotonic() - began
        log = run.stderr.decode("utf-8", "replace")
        if run.returncode == 0 and llama_log.complete(log):
            return wall, llama_log.perf(log)["load_ms"] / 1000, log
    raise RuntimeError(f"llama-completion failed: {log[-2000:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-gb", default="1,3,6")
    parser.add_argument("--embd", type=int, default=4096)
    parser.add_argument("--conditions", default=",".join(CONDITIONS),
                        help="which page caches a start finds empty: " + ", ".join(CONDITIONS))
    parser.add_argument("--masters", default=",".join(MASTERS),
                        help="which masters start: " + ", ".join(MASTERS) + " (the workers are stock)")
    args = parser.parse_args()
    asked = chosen(parser, "--masters", args.masters, MASTERS)
    chosen(parser, "--conditions", args.conditions, CONDITIONS)
    work = Path(tempfile.mkdtemp(prefix="bench-start-", dir=os.environ.get("LLAMA_RPC_BENCH_DIR", "/var/tmp")))
    tool, paths_tool = str(work / "llama-rpc-cache"), str(work / "worker-paths")
    subprocess.run(["cc", "-O2", "-o", tool, str(TOOL_SOURCE)], check=True)
    subprocess.run(["cc", "-O2", "-o", paths_tool, str(Path(__file__).with_name("worker_paths.c"))], check=True)
    cores = len(os.sched_getaffinity(0))
    speed_before = fixed_work()
    for name in MASTERS:
        (work / f"{name}-build").mkdir()
    stock = llama_cpp.role_build(work / "stock-build")
    builds = {"stock": lambda: (stock, lambda record: {}, {}),
              "hash-ahead": lambda: (llama_cpp.role_build(work / "hash-ahead-build", patches=["rpc_hash_ahead"]),
                                     lambda record: {"GGML_RPC_LOAD_THREADS": str(cores)}, {"hash_threads": cores}),
              "known hashes": lambda: (llama_cpp.role_build(work / "known-hashes-build", patches=["rpc_known_hashes"]),
                                       lambda record: {"GGML_RPC_HASH_RECORD": str(record)}, {"known_hashes": True})}
    masters = {name: builds[name]() for name in builds if name.replace(" ", "-") in asked}
    known_master = masters["known hashes"][0] if "known hashes" in masters else None

    # the constants, measured in this run
    blob = work / "blob"
    with open(blob, "wb") as handle:
        for _megabyte in range(2048):
            handle.write(os.urandom(1 << 20))
    constants = {"disk_read_rate": statistics.median(disk_read_rate(blob) for _round in range(3))}
    subprocess.run(["cat", str(blob)], stdout=subprocess.DEVNULL, check=True)
    constants.update(hash_rate=statistics.median(hash_rate(tool, blob) for _round in range(3)),
                     page_cache_rate=page_cache_rate(blob), network_rate=raw_tcp_rate(),
                     worker_hit_rate=worker_path_rate(paths_tool, "hit", blob, work))
    blob.unlink()
    print("constants measured in this run: " + ", ".join(f"{name} {value / 1e9:.2f} GB/s" for name, value in constants.items()),
          flush=True)
    load_time.FIGURES.update({name: (value,) + load_time.FIGURES[name][1:] for name, value in constants.items()
                              if name in load_time.FIGURES})

    rows = []
    for size_gb in (float(size) for size in args.sizes_gb.split(",")):
        layer_bytes = 4 * (4 * args.embd * args.embd + 3 * args.embd * 4 * args.embd)  # F32: attention and feed-forward
        layers = max(2, round(size_gb * 1e9 / layer_bytes))
        (work / f"model-{size_gb:g}").mkdir()
        model = tiny_model.write_model(work / f"model-{size_gb:g}" / "model.gguf", embd=args.embd, layers=layers,
                                       ff=4 * args.embd, heads=16, kv_heads=16)
        header = gguf.read_header(model)
        sent = [tensor for tensor in header["tensors"] if not tensor["name"].startswith("token_embd")]
        hashed_list = tensor_cache.hashed_tensors(header)
        model_bytes, hashed = sum(t["size"] for t in sent), sum(t["size"] for t in hashed_list)
        file_bytes = os.path.getsize(model)
        # this footprint's rates (the worker's hit work grows with it here), and the disk as each side reads it
        hit_at_size, worker_disk = worker_rates(paths_tool, model, work)
        master_disk = statistics.median(populate_rate(model) for _round in range(2))
        load_time.FIGURES["worker_hit_rate"] = (hit_at_size,) + load_time.FIGURES["worker_hit_rate"][1:]
        print(f"{file_bytes / 1e9:5.2f} GB: the worker's hit {hit_at_size / 1e9:.2f} GB/s, its cache reads from the disk "
              f"{worker_disk / 1e9:.2f} GB/s, the master's populate from the disk {master_disk / 1e9:.2f} GB/s", flush=True)
        record = model.parent / f".{model.name}.tensors.json"
        module("gguf_tensor_hashes", {"path": str(model), "tool": tool, "manifest": str(record)}, work)
        # the real worker's hit, as the model takes it: one worker holding the whole model in its page-cached cache
        # files, filled by the known-hashes master's one lane (its own account of the fill, the warmup pass left out);
        # then the same with the files dropped, whose extra time is the disk as the worker reads it
        rpc_hit, rpc_cold_hit = solo_hit_rates(stock, known_master, model, record, hashed, work) if known_master else (None, None)
        if rpc_hit:
            print(f"{file_bytes / 1e9:5.2f} GB: a worker's hit over RPC {rpc_hit / 1e9:.2f} GB/s, alone on this machine "
                  f"(worker_paths.c's emulation of its work: {hit_at_size / 1e9:.2f} GB/s, x{hit_at_size / rpc_hit:.2f}); "
                  f"{rpc_cold_hit / 1e9:.2f} GB/s with its cache files dropped", flush=True)
            load_time.FIGURES["worker_hit_rate"] = (rpc_hit,) + load_time.FIGURES["worker_hit_rate"][1:]
        with Worker(stock, work / "w1") as first, Worker(stock, work / "w2") as second:
            workers = (first, second)
            start(stock, model, workers, {})  # the first (cold) load fills the workers' caches, as a first deploy does
            caches = [path for worker in workers for path in worker.cache.iterdir()]
            # the disk as a worker reads it on a hit: each cache file whole, one after another (a file's readahead
            # starts small: many files read slower than one of their size)
            dropped_rate, cached_rate = files_read_rate(caches)
            plain_disk = 1 / (1 / dropped_rate - 1 / cached_rate) if dropped_rate < cached_rate else worker_disk
            print(f"{file_bytes / 1e9:5.2f} GB: the workers' cache files read {dropped_rate / 1e9:.2f} GB/s dropped, "
                  f"{cached_rate / 1e9:.2f} GB/s from the page cache: their disk {plain_disk / 1e9:.2f} GB/s", flush=True)
            # the disk as the worker itself reads it on a hit: the time its cold hits take beyond its warm ones
            worker_disk = (1 / (1 / rpc_cold_hit - 1 / rpc_hit) if rpc_hit and rpc_cold_hit < rpc_hit else plain_disk)
            print(f"{file_bytes / 1e9:5.2f} GB: the disk as the worker reads it on its hits {worker_disk / 1e9:.2f} GB/s "
                  f"(the model's input; a plain read of its files: {plain_disk / 1e9:.2f} GB/s)", flush=True)
            shares = [sum(path.stat().st_size for path in worker.cache.iterdir()) for worker in workers]
            together = statistics.median(together_read_rate(model, [list(worker.cache.iterdir()) for worker in workers])
                                         for _round in range(2))
            print(f"{file_bytes / 1e9:5.2f} GB: the model and both workers' cache files read at once: "
                  f"{together / 1e9:.2f} GB/s together (one reader: {constants['disk_read_rate'] / 1e9:.2f})", flush=True)
            for name, (bin_dir, env, options) in masters.items():
                for condition_name in args.conditions.split(","):
                    condition = CONDITIONS[condition_name]
                    for worker in workers:
                        worker.wait_for_memory_back()
                    held_and_dropped(model, caches, condition)
                    reads_before = [proc_numbers(f"/proc/{worker.process.pid}/io")["read_bytes"] for worker in workers]
                    saved_before, reclaimed_before = sum(worker.saved() for worker in workers), pages_reclaimed()
                    cpu_before = cpu_now(workers)
                    preempted_before = [preempted(worker.process.pid) for worker in workers]
                    first_token, load_s, log = start(bin_dir, model, workers, env(record))
                    reclaimed = pages_reclaimed() - reclaimed_before
                    # where the start's CPU went: each worker's and the master's CPU-seconds, beside each worker's
                    # share over the model's hit rate: less CPU than the load's time is waiting (for the master, or
                    # for a core), more is work the model does not count
                    cpu = [after - before for after, before in zip(cpu_now(workers), cpu_before)]
                    times_preempted = sum(preempted(worker.process.pid) - before
                                          for worker, before in zip(workers, preempted_before))
                    master_read = resident(model)
                    worker_read = sum(proc_numbers(f"/proc/{worker.process.pid}/io")["read_bytes"] - before
                                      for worker, before in zip(workers, reads_before))
                    stored = sum(worker.saved() for worker in workers) - saved_before
                    spec = [{"bytes": model_bytes * share / max(sum(shares), 1), "memory": 0, "disk_read": worker_disk,
                             "disk_write": worker_disk, "cache_in_memory": condition["caches"]} for share in shares]
                    predicted = load_time.predict(model_bytes, hashed, len(sent), spec,
                                                  {"disk_read": master_disk,
                                                   "cached_bytes": file_bytes if condition["model"] else 0},
                                                  constants["network_rate"], "staged",
                                                  master_bytes=file_bytes - model_bytes, shared_cores=cores,
                                                  shared_disk_rate=together, **options)
                    row = {"model_gb": round(file_bytes / 1e9, 2), "master": name, "condition": condition_name,
                           "first_token_s": round(first_token, 2), "load_s": round(load_s, 2),
                           "predicted_s": predicted["seconds"], "ratio": round(load_s / predicted["seconds"], 2),
                           "bound": predicted["bound"], "parts": predicted["parts"],
                           "master_read_gb": round(master_read / 1e9, 3),
                           "master_own_gb": round((file_bytes - hashed) / 1e9, 3),
                           "workers_read_gb": round(worker_read / 1e9, 2), "tensors_stored": stored,
                           "record_used": "tensor hashes from the record" in log,
                           # llama.cpp's load time runs to the end of its first pass through every weight (the
                           # warmup); the prompt's pass after it, every weight in memory, costs about as much
                           "first_pass_s": round(llama_log.perf(log).get("prompt_ms", 0) / 1000, 2),
                           "lanes_s": lanes_seconds(log), "pages_reclaimed": reclaimed,
                           "workers_cpu_s": [round(seconds, 2) for seconds in cpu[:-1]], "master_cpu_s": round(cpu[-1], 2),
                           "workers_alone_s": [round(share / load_time.figure("worker_hit_rate"), 2) for share in shares],
                           "workers_preempted": times_preempted}
                    rows.append(row)
                    print(f"{row['model_gb']:5.2f} GB {name:13s} {condition_name:12s}: first token {first_token:6.2f} s, "
                          f"load {load_s:6.2f} s, predicted {predicted['seconds']:6.2f} s (x{row['ratio']:.2f}; "
                          f"{predicted['bound']}; parts {predicted['parts']}); the master read "
                          f"{row['master_read_gb']} GB of the file, the workers {row['workers_read_gb']} GB from their "
                          f"disk; {stored} tensors stored; a pass through the weights {row['first_pass_s']} s; the "
                          f"lanes {row['lanes_s']} s; {reclaimed} pages reclaimed by the kernel; CPU-s: workers "
                          f"{row['workers_cpu_s']} (their fill alone {row['workers_alone_s']}), the master "
                          f"{row['master_cpu_s']}; the workers preempted {times_preempted} times", flush=True)
        subprocess.run(["rm", "-rf", str(model.parent), str(work / "w1"), str(work / "w2")], check=True)

    print("\n| Model | Master | Page caches | Start to first token, and exit (s) | Load (s) | Load predicted (s) | "
          "Measured / predicted | Master read of the file (GB) | Its own share (GB) |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['model_gb']} GB | {row['master']} | {row['condition']} | {row['first_token_s']} | {row['load_s']} "
              f"| {row['predicted_s']} | {row['ratio']} | {row['master_read_gb']} | {row['master_own_gb']} |")
    within = [row for row in rows if 0.8 <= row["ratio"] <= 1.2]
    print(f"the machine: a fixed piece of work took {speed_before:.2f} CPU-s before, {fixed_work():.2f} after "
          "(0.29 to 0.32 at its best hour)")
    print(f"\n{len(within)} of {len(rows)} predictions within 20% of the measured load "
          f"(hash-ahead: GGML_RPC_LOAD_THREADS={cores}; the master and both workers on these {cores} cores and one disk)")
    for condition in args.conditions.split(","):
        ratios = [row["ratio"] for row in rows if row["condition"] == condition]
        print(f"  {condition}: measured / predicted {min(ratios):.2f} to {max(ratios):.2f}, "
              f"{sum(1 for ratio in ratios if 0.8 <= ratio <= 1.2)} of {len(ratios)} within 20%")
    (work / "bench-start.json").write_text(json.dumps({"constants": constants, "starts": rows}, indent=2))
    print(f"all figures: {work / 'bench-start.json'}")


if __name__ == "__main__":
    main()
