"""Benchmark: the load-time model's constants, and a model's first load cold, staged and warm, side by side.

Real parts on this machine's loopback: llama.cpp built as the llama_build role builds it (ggml-rpc-server with -c,
llama-completion), the collection's cache helper, and its staging modules. Prints the figures; asserts nothing.

1. The constants the load-time model (plugins/module_utils/load_time.py) takes from this machine:
   - hash rate: llama.cpp's FNV-1a 64 over a page-cached file, bytes per user CPU-second of the hashing process
     (CPU time, so another job on the machine does not slow the figure);
   - page-cache rate: the master's loader maps the model and reads it from there: touching every page of a
     page-cached file through mmap, bytes per second;
   - per-tensor cost: the load time of a model of many tiny tensors through one worker, per tensor.
2. One worker with its tensor cache (-c), a model whose weights are almost all in tensors over 10 MiB (as a 70B's
   are): its first load with the cache empty (cold: llama.cpp sends and stores the weights), after staging it with
   the collection's modules (staged: the load sends hashes), and again (warm). Load times, the worker's cache
   writes, and the ratios staged / cold, warm / cold; the staging's own time and rate beside raw TCP on loopback.

    python -m tests.bench.load [--embd 2048] [--layers 4] [--rounds 3]

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

from ansible_collections.graviton.llama_rpc.plugins.module_utils import gguf, llama_log, tensor_cache
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

    def saved(self):
        return self.log.read_text(errors="replace").count("saved to")


def load_ms(bin_dir, model, endpoint):
    """llama-completion through the worker, one token; its load time (retrying a run that lost its log)."""
    command = [str(bin_dir / "llama-completion"), "-m", str(model), "--rpc", endpoint, "-ngl", "999", "-fit", "off",
               "-n", "1", "-p", "Hello", "-no-cnv", "-lv", "4", "-c", "256", "-t", "1"]
    for _attempt in range(3):
        run = subprocess.run(command, capture_output=True, env=dict(os.environ, GGML_NO_BACKTRACE="1"), check=False)
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embd", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-load-"))
    tool = str(work / "llama-rpc-cache")
    subprocess.run(["cc", "-O2", "-o", tool, str(TOOL_SOURCE)], check=True)
    from ansible_collections.graviton.llama_rpc.plugins.module_utils.cpu_features import describe_cpu
    cpu = describe_cpu(Path("/proc/cpuinfo").read_text(), "x86_64")
    bin_dir = llama_cpp.build("x86_64", cpu["cmake_args"], ["ggml-rpc-server", "llama-completion"])

    # 1. constants
    blob = work / "blob"
    with open(blob, "wb") as handle:
        for _megabyte in range(1024):
            handle.write(os.urandom(1 << 20))
    figures = {"hash_rate_gb_s": round(statistics.median(hash_rate(tool, blob) for _round in range(3)) / 1e9, 3),
               "page_cache_rate_gb_s": round(statistics.median(page_cache_rate(blob) for _round in range(3)) / 1e9, 2)}
    blob.unlink()
    many = tiny_model.write_model(work / "many.gguf", embd=64, layers=64, ff=128)
    tensors = len(gguf.read_header(many)["tensors"]) - 1  # the token embeddings stay on the master
    with Worker(bin_dir, work / "many-cache") as worker:
        load_ms(bin_dir, many, f"127.0.0.1:{worker.port}")
        per_load = statistics.median(load_ms(bin_dir, many, f"127.0.0.1:{worker.port}") for _round in range(args.rounds))
    figures["per_tensor_ms"] = round(per_load / tensors, 3)
    print(f"constants: {figures} ({tensors} tensors in the many-tensor model)")

    # 2. cold, staged, warm: every matrix over 10 MiB (no grouped KV heads), as in a 70B model
    model = tiny_model.write_model(work / "big.gguf", embd=args.embd, layers=args.layers, ff=4 * args.embd, heads=16,
                                   kv_heads=16)
    header = gguf.read_header(model)
    hashed = tensor_cache.hashed_tensors(header)
    weights = sum(tensor["size"] for tensor in header["tensors"] if not tensor["name"].startswith("token_embd"))
    share = sum(tensor["size"] for tensor in hashed) / weights
    print(f"model: {model.stat().st_size / 1e6:.0f} MB, {100 * share:.1f}% of the weights the worker gets in tensors over 10 MiB")
    subprocess.run(["cat", str(model)], stdout=subprocess.DEVNULL, check=True)
    rounds = {"cold": [], "staged": [], "warm": [], "staging_s": [], "cold_saved": [], "staged_saved": []}
    for round_index in range(args.rounds):
        root = work / f"cache-{round_index}"
        with Worker(bin_dir, root / "cold") as worker:
            rounds["cold"].append(load_ms(bin_dir, model, f"127.0.0.1:{worker.port}"))
            rounds["cold_saved"].append(worker.saved())
        manifest = module("gguf_tensor_hashes", {"path": str(model), "tool": tool, "manifest": str(work / "manifest.json")}, work)
        cache = root / "staged" / "rpc"
        owner = __import__("pwd").getpwuid(os.getuid()).pw_name
        wanted = [{"hash": t["hash"], "size": t["size"]} for t in manifest["tensors"]]
        port = llama_cpp.free_port()
        receiver = start_module("rpc_tensor_cache", {"dir": str(cache), "owner": owner, "tool": tool, "wanted": wanted,
                                                     "receive": {"address": "127.0.0.1", "port": port, "timeout": 120}}, work)
        sent = module("rpc_tensor_send", {"model": str(model), "tensors": manifest["tensors"],
                                          "workers": [{"endpoint": f"127.0.0.1:{port}", "hashes": [t["hash"] for t in wanted]}]},
                      work)
        receiver.communicate(timeout=300)
        rounds["staging_s"].append(sent["seconds"])
        with Worker(bin_dir, root / "staged") as worker:
            rounds["staged"].append(load_ms(bin_dir, model, f"127.0.0.1:{worker.port}"))
            rounds["staged_saved"].append(worker.saved())
            rounds["warm"].append(load_ms(bin_dir, model, f"127.0.0.1:{worker.port}"))
        print(f"round {round_index + 1}: cold {rounds['cold'][-1]:.0f} ms ({rounds['cold_saved'][-1]} tensors stored by the "
              f"worker), staging {sent['seconds']:.2f} s, staged {rounds['staged'][-1]:.0f} ms ({rounds['staged_saved'][-1]} "
              f"stored), warm {rounds['warm'][-1]:.0f} ms")
    median = statistics.median
    staged_bytes = sum(t["size"] for t in hashed)
    raw = raw_tcp_rate()
    results = {
        "constants": figures,
        "model_mb": round(model.stat().st_size / 1e6), "hashed_share": round(share, 4), "rounds": args.rounds,
        "load_ms": {state: median(rounds[state]) for state in ("cold", "staged", "warm")},
        "ratios": {"staged_vs_cold": round(median(rounds["staged"]) / median(rounds["cold"]), 3),
                   "warm_vs_cold": round(median(rounds["warm"]) / median(rounds["cold"]), 3)},
        "staging": {"seconds": median(rounds["staging_s"]), "rate_mb_s": round(staged_bytes / median(rounds["staging_s"]) / 1e6),
                    "raw_tcp_mb_s": round(raw / 1e6),
                    "fraction_of_raw_tcp": round(staged_bytes / median(rounds["staging_s"]) / raw, 3)},
        "tensors_the_worker_stored": {"cold": median(rounds["cold_saved"]), "staged": median(rounds["staged_saved"])},
    }
    (work / "bench-load.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    print(f"all figures: {work / 'bench-load.json'}")


if __name__ == "__main__":
    main()
