"""Benchmark: the load-time model's constants, and a model's first load cold, staged and warm, side by side.

Real parts on this machine's loopback: llama.cpp built as the llama_build role builds it (ggml-rpc-server with -c,
llama-completion), the collection's cache helper, and its staging modules. Prints the figures; asserts nothing.

1. The constants the load-time model (plugins/module_utils/plan/load_time.py) takes from this machine:
   - hash rate: llama.cpp's FNV-1a 64 over a page-cached file, bytes per user CPU-second of the hashing process
     (CPU time, so another job on the machine does not slow the figure);
   - page-cache rate: the master's loader maps the model and reads it from there: touching every page of a
     page-cached file through mmap, bytes per second;
   - per-tensor cost: the load time of a model of many tiny tensors through one worker, per tensor.
   - the worker's own work per byte outside its hashing (tests/bench/worker_paths.c, as llama.cpp's worker does it):
     on a cache hit (a zeroed buffer, the cache file read into it, the copy into the tensor) and on a miss with -c
     (the same, plus the cache file written);
   - the disk's write rate (the workers' cache writes beyond the dirty-page budget) and one TCP flow on loopback.
2. For each model size (default 1, 3 and 6 GB to the worker; weights in tensors over 10 MiB, as a 70B's are), one
   worker with its tensor cache (-c): the first load with the cache empty (cold: llama.cpp sends and stores the
   weights), after staging it with the collection's modules (staged: the load sends hashes), and again (warm). Each
   load beside what the load-time model predicts from the constants of step 1 (this run's), and their ratio. The
   worker's own work per byte is measured again at each size, over the model file itself: on this machine it costs
   more per byte as the worker's footprint grows (the kernel's system time on fresh memory: 1.0 to 1.3 GB/s at 1 GB,
   0.6 to 0.9 GB/s at 6 GB), which a constant measured at 1 GB does not see.
   Each load twice, side by side: through the stock master, and through the master built with the collection's
   hash-ahead patch (llama_build_patches: [rpc_hash_ahead]) hashing on every core, its prediction with as many
   hash threads and the cores the master and the worker share here; the worker is stock's for both.
   Each load also records the worker's and the master's CPU time, the bytes they read from the disk, and the memory
   and write-back the machine held when it started.

    python -m tests.bench.load [--sizes-gb 1,3,6] [--embd 4096]

Run through `make bench-load`.
"""

import argparse
import json
import mmap
import os
import resource
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import gguf
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import llama_log, tensor_cache
from tests.tools import llama_cpp, tiny_model
from tests.tools.collection import start_module

ROOT = Path(__file__).resolve().parents[2]
TOOL_SOURCE = ROOT / "roles" / "llama_build" / "files" / "llama-rpc-cache.c"


def child_user_seconds():
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime


def hash_rate(tool, path):
    """FNV-1a's own cost: user CPU time only (the helper's copy out of the page cache is system time, which the
    master, hashing the mapped file in place, does not pay; mapping it is the page-cache rate below)."""
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)  # into the page cache
    before = child_user_seconds()
    subprocess.run([tool, "hash", str(path)], stdout=subprocess.DEVNULL, check=True)
    return path.stat().st_size / (child_user_seconds() - before)


def page_cache_rate(path):
    """Bytes per second of touching every page of a page-cached file through a private mapping (as the loader reads)."""
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ) as mapped:
        size = len(mapped)
        started = time.perf_counter()
        total = 0
        for offset in range(0, size, mmap.PAGESIZE):
            total += mapped[offset]
        return size / (time.perf_counter() - started)


def module(name, args, work):
    """One of the collection's modules in its own process, as Ansible runs it; returns its result."""
    result = json.loads(start_module(name, args, work).communicate()[0])
    if result.get("failed"):
        raise RuntimeError(f"{name}: {result.get('msg')}")
    return result


class Worker:
    """ggml-rpc-server -c on loopback with its own cache directory (SIGPIPE ignored, as systemd runs it)."""

    def __init__(self, bin_dir, cache_root):
        self.bin_dir, self.cache_root = bin_dir, cache_root
        self.cache = Path(cache_root) / "rpc"
        self.port = llama_cpp.free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.log = Path(cache_root) / "worker.log"

    def __enter__(self):
        Path(self.cache_root).mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen([str(self.bin_dir / "ggml-rpc-server"), "-H", "127.0.0.1", "-p", str(self.port),
                                         "-t", "1", "-c"], env=dict(os.environ, LLAMA_CACHE=str(self.cache_root)),
                                        stdout=open(self.log, "w"), stderr=subprocess.STDOUT, restore_signals=False)
        llama_cpp.wait_for_port(self.port, self.process)
        return self

    def __exit__(self, *exc):
        self.process.terminate()
        self.process.wait(timeout=30)

    def wait_for_memory_back(self, limit=512 << 20, timeout=60):
        """Until the worker has freed the buffers of the client before (it frees them when the connection closes, after
        llama-completion has exited): a load that starts sooner shares the machine's memory with them."""
        deadline = time.monotonic() + timeout
        while proc_numbers(f"/proc/{self.process.pid}/status")["VmRSS"] * 1024 > limit and time.monotonic() < deadline:
            time.sleep(0.1)

    def saved(self):
        return self.log.read_text(errors="replace").count("saved to")


def proc_numbers(path):
    """The numeric fields of a /proc file of "Name: number [unit]" lines (meminfo and status in kB, io in bytes)."""
    fields = {}
    for line in Path(path).read_text().splitlines():
        name, _colon, value = line.partition(":")
        if value.split() and value.split()[0].isdigit():
            fields[name] = int(value.split()[0])
    return fields


def cpu_seconds(pid, thread=None):
    """(user, system) CPU seconds a process, or one of its threads (thread: its id), has used (/proc stat, in clock
    ticks). The benchmarks' one reader of it: sum() of it is the total."""
    stat = Path(f"/proc/{pid}/task/{thread}/stat" if thread else f"/proc/{pid}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def load_ms(bin_dir, model, endpoint, env=None):
    """llama-completion through the worker, one token; its load time (retrying a run that lost its log). env: what the
    master's build reads (GGML_RPC_LOAD_THREADS for the hash-ahead build)."""
    command = [str(bin_dir / "llama-completion"), "-m", str(model), "--rpc", endpoint, "-ngl", "999", "-fit", "off",
               "-n", "1", "-p", "Hello", "-no-cnv", "-lv", "4", "-c", "256", "-t", "1"]
    for _attempt in range(3):
        run = subprocess.run(command, capture_output=True, env=dict(os.environ, GGML_NO_BACKTRACE="1", **(env or {})),
                             check=False)
        log = run.stderr.decode("utf-8", "replace")
        if run.returncode == 0 and llama_log.complete(log):
            return llama_log.perf(log)["load_ms"]
    raise RuntimeError(f"llama-completion failed: {log[-2000:]}")


def raw_tcp_rate(megabytes=512):
    """Bytes per second of one TCP flow over loopback (sendall of zeros into a reader that discards them)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]

        def sink():
            connection, _peer = server.accept()
            with connection:
                while connection.recv(1 << 20):
                    pass

        reader = threading.Thread(target=sink)
        reader.start()
        payload = b"\0" * (1 << 20)
        with socket.create_connection(("127.0.0.1", port)) as sender:
            started = time.perf_counter()
            for _megabyte in range(megabytes):
                sender.sendall(payload)
            sender.shutdown(socket.SHUT_WR)
            reader.join()
            return megabytes * (1 << 20) / (time.perf_counter() - started)


def worker_path_rate(tool, mode, path, work):
    """Bytes per second of the worker's own work on a hit or a miss (tests/bench/worker_paths.c), median of 3."""
    rates = []
    for _round in range(3):
        store = work / "store"
        store.mkdir(exist_ok=True)
        args = [tool, mode, str(path), str(128 << 20)] + ([str(store)] if mode == "store" else [])
        rates.append(float(subprocess.run(args, capture_output=True, text=True, check=True).stdout))
        subprocess.run(["rm", "-rf", str(store)], check=True)
    return statistics.median(rates)


def disk_write_rate(directory, megabytes=1024):
    """Bytes per second of a write that reaches the disk (written, then synced), as writes beyond the budget wait."""
    target = Path(directory) / "disk-write"
    started = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={megabytes}", "conv=fdatasync", "status=none"],
                   check=True)
    rate = megabytes * (1 << 20) / (time.perf_counter() - started)
    target.unlink()
    return rate


def stage(model, tool, endpoint, work):
    """rpc_master's staging of one worker's cache, through the worker's rpc-server, with the collection's modules;
    returns the staging's seconds."""
    manifest = module("gguf_tensor_hashes", {"path": str(model), "tool": tool, "manifest": str(work / "manifest.json")}, work)
    sent = module("rpc_tensor_send", {"model": str(model), "tensors": manifest["tensors"],
                                      "workers": [{"endpoint": endpoint, "hashes": [t["hash"] for t in manifest["tensors"]]}]},
                  work)
    return sent["seconds"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-gb", default="1,3,6")
    parser.add_argument("--embd", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the per-tensor constant")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-load-", dir=os.environ.get("LLAMA_RPC_BENCH_DIR", "/var/tmp")))
    tool, paths_tool = str(work / "llama-rpc-cache"), str(work / "worker-paths")
    subprocess.run(["cc", "-O2", "-o", tool, str(TOOL_SOURCE)], check=True)
    subprocess.run(["cc", "-O2", "-o", paths_tool, str(Path(__file__).with_name("worker_paths.c"))], check=True)
    from ansible_collections.graviton.llama_rpc.plugins.module_utils.plan import load_time
    # Both built by the llama_build role (the one of make test, kept in the build cache): stock, and the master's
    # hash-ahead build (llama_build_patches: [rpc_hash_ahead]) on every core; the worker is stock's for both.
    for name in ("stock-build", "hash-ahead-build"):
        (work / name).mkdir()
    bin_dir = llama_cpp.role_build(work / "stock-build")
    cores = len(os.sched_getaffinity(0))
    masters = {"stock": (bin_dir, {}, 1),
               "hash-ahead": (llama_cpp.role_build(work / "hash-ahead-build", patches=["rpc_hash_ahead"]),
                              {"GGML_RPC_LOAD_THREADS": str(cores)}, cores)}
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    # 1. constants, measured in this run
    blob = work / "blob"
    with open(blob, "wb") as handle:
        for _megabyte in range(1024):
            handle.write(os.urandom(1 << 20))
    subprocess.run(["cat", str(blob)], stdout=subprocess.DEVNULL, check=True)
    constants = {"hash_rate": statistics.median(hash_rate(tool, blob) for _round in range(3)),
                 "page_cache_rate": statistics.median(page_cache_rate(blob) for _round in range(3)),
                 "worker_hit_rate": worker_path_rate(paths_tool, "hit", blob, work),
                 "worker_store_rate": worker_path_rate(paths_tool, "store", blob, work),
                 "disk_write_rate": disk_write_rate(work), "network_rate": raw_tcp_rate()}
    blob.unlink()
    many = tiny_model.write_model(work / "many.gguf", embd=64, layers=64, ff=128)
    tensors = len(gguf.read_header(many)["tensors"]) - 1  # the token embeddings stay on the master
    with Worker(bin_dir, work / "many-cache") as worker:
        load_ms(bin_dir, many, f"127.0.0.1:{worker.port}")
        per_load = statistics.median(load_ms(bin_dir, many, f"127.0.0.1:{worker.port}") for _round in range(args.rounds))
    constants["per_tensor_s"] = per_load / 1000 / tensors
    print("constants measured in this run: " + ", ".join(
        f"{name} {value / 1e9:.2f} GB/s" if name.endswith("rate") else f"{name} {value * 1000:.3f} ms"
        for name, value in constants.items()), flush=True)
    load_time.FIGURES.update({name: (value,) + load_time.FIGURES[name][1:] for name, value in constants.items()
                              if name in load_time.FIGURES})

    # 2. each size: cold, staged, warm, beside the model's prediction with this run's constants
    rows = []
    for size_gb in (float(size) for size in args.sizes_gb.split(",")):
        layer_bytes = 4 * (4 * args.embd * args.embd + 3 * args.embd * 4 * args.embd)  # F32: attention and feed-forward
        layers = max(1, round(size_gb * 1e9 / layer_bytes))
        model = tiny_model.write_model(work / f"model-{size_gb:g}.gguf", embd=args.embd, layers=layers, ff=4 * args.embd,
                                       heads=16, kv_heads=16)
        header = gguf.read_header(model)
        sent = [tensor for tensor in header["tensors"] if not tensor["name"].startswith("token_embd")]
        model_bytes, hashed = sum(t["size"] for t in sent), sum(t["size"] for t in tensor_cache.hashed_tensors(header))
        subprocess.run(["cat", str(model)], stdout=subprocess.DEVNULL, check=True)  # the master's page cache
        # The worker's own work per byte, at this load's footprint (its buffer as big as its share): on this machine the
        # kernel's time on fresh memory grows faster than the bytes, so the rates of step 1 (1 GB) do not hold at 6 GB.
        at_size = {"worker_hit_rate": worker_path_rate(paths_tool, "hit", model, work),
                   "worker_store_rate": worker_path_rate(paths_tool, "store", model, work)}
        load_time.FIGURES.update({name: (value,) + load_time.FIGURES[name][1:] for name, value in at_size.items()})
        print(f"{model_bytes / 1e9:5.2f} GB: the worker's own work measured at this size: hit "
              f"{at_size['worker_hit_rate'] / 1e9:.2f} GB/s, store {at_size['worker_store_rate'] / 1e9:.2f} GB/s", flush=True)
        worker_spec = [{"bytes": model_bytes, "memory": memory, "disk_read": constants["page_cache_rate"],
                        "disk_write": constants["disk_write_rate"], "cache_in_memory": True}]
        master = {"disk_read": constants["page_cache_rate"], "cached_bytes": model_bytes}
        # each load's time, and the tensors the worker stored in its cache during it (none once staged)
        measured, stored, seen = {}, {}, {}

        def timed_load(state, worker, master_name):
            """One load, with what the machine held when it started and what came from the disk during it."""
            master_bin, master_env, _threads = masters[master_name]
            state = (master_name, state)
            worker.wait_for_memory_back()
            pid = worker.process.pid
            memory, status, saved_before = proc_numbers("/proc/meminfo"), proc_numbers(f"/proc/{pid}/status"), worker.saved()
            worker_read, worker_cpu = proc_numbers(f"/proc/{pid}/io")["read_bytes"], cpu_seconds(pid)
            master_before = resource.getrusage(resource.RUSAGE_CHILDREN)  # llama-completion, once it has exited
            measured[state] = load_ms(master_bin, model, f"127.0.0.1:{worker.port}", master_env) / 1000
            stored[state] = worker.saved() - saved_before
            worker_after, master_after = cpu_seconds(pid), resource.getrusage(resource.RUSAGE_CHILDREN)
            seen[state] = {"dirty_gb_at_start": round((memory["Dirty"] + memory["Writeback"]) * 1024 / 1e9, 2),
                           "available_gb_at_start": round(memory["MemAvailable"] * 1024 / 1e9, 2),
                           "worker_resident_gb_at_start": round(status["VmRSS"] * 1024 / 1e9, 2),
                           "worker_cpu_user_s": round(worker_after[0] - worker_cpu[0], 2),
                           "worker_cpu_system_s": round(worker_after[1] - worker_cpu[1], 2),
                           "master_cpu_user_s": round(master_after.ru_utime - master_before.ru_utime, 2),
                           "master_cpu_system_s": round(master_after.ru_stime - master_before.ru_stime, 2),
                           "worker_disk_read_gb": round((proc_numbers(f"/proc/{pid}/io")["read_bytes"] - worker_read) / 1e9, 2),
                           "master_disk_read_gb": round((master_after.ru_inblock - master_before.ru_inblock) * 512 / 1e9, 2)}

        # stock, then the hash-ahead master, each with a worker of its own (a fresh cache, or a fresh staging)
        for master_name in masters:
            with Worker(bin_dir, work / "cold") as worker:
                timed_load("cold", worker, master_name)
            subprocess.run(["rm", "-rf", str(work / "cold")], check=True)
            with Worker(bin_dir, work / "staged") as worker:
                staging_s = stage(model, tool, f"127.0.0.1:{worker.port}", work)
                for state in ("staged", "warm"):
                    timed_load(state, worker, master_name)
            subprocess.run(["rm", "-rf", str(work / "staged")], check=True)
        for state in ("cold", "staged", "warm"):
            for master_name, (_bin, _env, threads) in masters.items():
                key = (master_name, state)
                predicted = load_time.predict(model_bytes, hashed, len(sent), worker_spec, master,
                                              constants["network_rate"], state, hash_threads=threads, shared_cores=cores)
                rows.append({"gb_to_worker": round(model_bytes / 1e9, 2), "master": master_name, "state": state,
                             "measured_s": round(measured[key], 2), "predicted_s": predicted["seconds"],
                             "ratio": round(measured[key] / predicted["seconds"], 2), "bound": predicted["bound"],
                             "parts": predicted["parts"], "tensors_stored": stored[key], "worker_rates_at_size": at_size,
                             **seen[key]})
                print(f"{model_bytes / 1e9:5.2f} GB {state:6s} {master_name:10s}: measured {measured[key]:6.2f} s "
                      f"({stored[key]} tensors stored by the worker), predicted {predicted['seconds']:6.2f} s, measured / "
                      f"predicted {rows[-1]['ratio']:.2f} ({predicted['bound']}); {seen[key]}", flush=True)
            stock_s, ahead_s = measured[("stock", state)], measured[("hash-ahead", state)]
            print(f"{model_bytes / 1e9:5.2f} GB {state:6s}: hash-ahead / stock {ahead_s / stock_s:.2f}", flush=True)
        print(f"{model_bytes / 1e9:5.2f} GB staging (rpc_tensor_send): {staging_s:.1f} s", flush=True)
        model.unlink()

    print("\n| GB to the worker | Cache | Master | Measured (s) | Predicted (s) | Measured / predicted | Bound |")
    print("|---:|---|---|---:|---:|---:|---|")
    for row in rows:
        print(f"| {row['gb_to_worker']} | {row['state']} | {row['master']} | {row['measured_s']} | {row['predicted_s']} "
              f"| {row['ratio']} | {row['bound']} |")
    print(f"(hash-ahead: GGML_RPC_LOAD_THREADS={cores}, the worker on the same {cores} cores)")
    within = [row for row in rows if 0.8 <= row["ratio"] <= 1.2]
    print(f"\n{len(within)} of {len(rows)} predictions within 20% of the measured load")
    results = {"constants": constants, "loads": rows}
    (work / "bench-load.json").write_text(json.dumps(results, indent=2))
    print(f"all figures: {work / 'bench-load.json'}")


if __name__ == "__main__":
    main()
