"""Benchmark: a model's first fetch to the master, over one connection per part against several (byte ranges).

A model host on loopback (tests/tools/model_server.py, a process of its own) caps each connection, as a CDN edge or one
S3 stream does; model_fetch (the module the role runs) fetches from it into a models directory and verifies every
part's sha256. Two models of about 1 GB with random weights: one file (as the README's 70B is published) and a set of
four parts fetched two at a time. For each, the time until the model is verified on the master with 1 connection per
part and with --connections, the ratio, and what the cap allows: the cap times the connections at once, up to this
machine's rates of writing and hashing (measured in the same run); and the time to the master's first token from the
fetched model (llama-completion, the master alone: a fetch stages no worker while it runs). Prints the table; asserts
nothing.

    python -m tests.bench.fetch [--size-gb 1] [--cap-mb 20] [--connections 8]

Run through `make bench-fetch`.
"""

import argparse
import contextlib
import hashlib
import io
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import model_source
from ansible_collections.graviton.llama_rpc.plugins.modules import model_fetch
from tests.bench import load
from tests.tools import llama_cpp, model_shapes, tiny_model
from tests.unit.plugins.module_runner import patch_module_args

MB = 1e6


def cpu_seconds(pid=None):
    """CPU-seconds used so far by a process (/proc/PID/stat), or by this one and its waited-for children."""
    if pid is None:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    return sum(load.cpu_seconds(pid))


def fetch(base, first_part, work, connections, parallel, bin_dir):
    """One fetch into a fresh models directory, then the master's first token from it (llama-completion, one token, the
    master alone, its page cache as the fetch left it): (seconds until verified, until the first token, the module's
    result)."""
    target = work / ("fetched-%d" % connections)
    shutil.rmtree(target, ignore_errors=True)
    model = model_source.parts(base + "/" + first_part, sha256sums=base + "/SHA256SUMS")
    args = dict(parts=model["parts"], sha256sums=base + "/SHA256SUMS", models_dir=str(target / "models"),
                state_dir=str(target / "state"), connections=connections, parallel=parallel)
    output = io.StringIO()
    began = time.monotonic()
    with patch_module_args(args), contextlib.redirect_stdout(output), contextlib.suppress(SystemExit):
        model_fetch.main()
    seconds = time.monotonic() - began
    result = json.loads(output.getvalue())
    if not result.get("done"):
        raise RuntimeError("the fetch did not end verified: %s" % result.get("msg", result))
    subprocess.run(llama_cpp.greedy_command(bin_dir, result["model_path"], "Hello", 1, "-t 2"), shell=True,
                   capture_output=True, check=True, timeout=600)
    first_token = time.monotonic() - began
    shutil.rmtree(target)
    return seconds, first_token, result


def record_seconds(model, work, jobs, rounds=3):
    """The median seconds of gguf_tensor_hashes writing the record of a page-cached model's tensor hashes, the step a
    deploy takes after the fetch, in `jobs` hashing processes."""
    tool = work / "llama-rpc-cache"
    if not tool.exists():
        subprocess.run(["cc", "-O2", "-o", str(tool), str(load.TOOL_SOURCE)], check=True)
    subprocess.run(["cat", str(model)], stdout=subprocess.DEVNULL, check=True)
    seconds = []
    for _round in range(rounds):
        manifest = work / "record.json"
        manifest.unlink(missing_ok=True)
        result = load.module("gguf_tensor_hashes", {"path": str(model), "tool": str(tool), "manifest": str(manifest),
                                                    "jobs": jobs}, work)
        seconds.append(result["seconds"])
    return statistics.median(seconds), result["hashed_bytes"]


def write_rate(work, size=512 << 20):
    """This disk's rate of writing a file and flushing it (bytes per second)."""
    block, path = os.urandom(8 << 20), work / "write-rate"
    began = time.monotonic()
    with open(path, "wb") as handle:
        for _count in range(size // len(block)):
            handle.write(block)
        handle.flush()
        os.fsync(handle.fileno())
    seconds = time.monotonic() - began
    path.unlink()
    return size / seconds


def hash_rate(size=1 << 30):
    block, digest = os.urandom(8 << 20), hashlib.sha256()
    began = time.monotonic()
    for _count in range(size // len(block)):
        digest.update(block)
    return size / (time.monotonic() - began)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--cap-mb", type=float, default=20.0, help="each connection's cap, MB/s")
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-fetch-", dir="/var/tmp"))
    (work / "build").mkdir()
    bin_dir = llama_cpp.role_build(work / "build")
    source = work / "published"
    source.mkdir()
    embd = 1024
    layers = max(1, round(args.size_gb * 1e9 / (4 * (4 * embd * embd + 3 * embd * 4 * embd))))
    shape = dict(embd=embd, layers=layers, ff=4 * embd, heads=16, kv_heads=16)
    one = tiny_model.write_model(source / "single.gguf", **shape)
    first = tiny_model.write_model(source / "set.gguf", split_max_size=int(args.size_gb * 1e9 / 4) + 1, **shape)
    parts = sorted(source.glob("set-*.gguf"))
    model_shapes.write_sha256sums([one] + parts, source / "SHA256SUMS")
    port = llama_cpp.free_port()
    host = subprocess.Popen([sys.executable, "tests/tools/model_server.py", str(source), "--port", str(port),
                             "--rate", str(int(args.cap_mb * MB))])
    try:
        llama_cpp.wait_for_port(port, host, 30)
        base = "http://127.0.0.1:%d" % port
        writing, hashing = write_rate(work), hash_rate()
        print("this machine: writes %.0f MB/s (flushed), hashes sha256 at %.0f MB/s; each connection capped at %g MB/s"
              % (writing / MB, hashing / MB, args.cap_mb), flush=True)
        rows = []
        for label, first_part, files, parallel in (("one file", one.name, [one], 1),
                                                   ("%d parts, 2 at once" % len(parts), first.name, parts, 2)):
            size = sum(path.stat().st_size for path in files)
            timed, first_token = {}, {}
            for connections in (1, args.connections):
                before = cpu_seconds() + cpu_seconds(host.pid)
                timed[connections], first_token[connections], result = fetch(base, first_part, work, connections,
                                                                             parallel, bin_dir)
                # the hashing processes detach themselves: their CPU is not counted here
                busy = (cpu_seconds() + cpu_seconds(host.pid) - before) / (timed[connections] * os.cpu_count())
                used = {part.get("connections", 1) for part in result["parts"]}
                print("  %s, %d connection(s) per part: verified in %.1f s, the master's first token at %.1f s "
                      "(connections used: %s; the host and the fetch kept %.0f%% of the cores busy)"
                      % (label, connections, timed[connections], first_token[connections], sorted(used), 100 * busy),
                      flush=True)
            # what the cap allows: every connection at its cap, the bytes written as they land, then hashed
            streams = min(parallel, len(files))
            allowed = [size / min(args.cap_mb * MB * streams * connections, writing) + size / hashing
                       for connections in (1, args.connections)]
            ratio, allowed_ratio = timed[1] / timed[args.connections], allowed[0] / allowed[1]
            rows.append((label, size / 1e9, timed[1], timed[args.connections], ratio, allowed_ratio,
                         ratio / allowed_ratio, first_token[1], first_token[args.connections]))
        print()
        print("| model | GB | verified, 1 connection, s | %d connections, s | ratio | the cap allows | share of it | "
              "first token, 1 connection, s | %d connections, s |" % (args.connections, args.connections))
        print("|---|---|---|---|---|---|---|---|---|")
        for label, gigabytes, single, several, ratio, allowed_ratio, share, token_single, token_several in rows:
            print("| %s | %.2f | %.1f | %.1f | %.2fx | %.2fx | %.0f%% | %.1f | %.1f |"
                  % (label, gigabytes, single, several, ratio, allowed_ratio, 100 * share, token_single, token_several))
        cores = len(os.sched_getaffinity(0))
        (alone, hashed), (together, _hashed) = (record_seconds(one, work, jobs) for jobs in (1, cores))
        print("\nthe record of the tensor hashes after the fetch (gguf_tensor_hashes, %.2f GB hashed, page-cached, median "
              "of 3): one process %.2f s (%.2f GB/s), %d at once %.2f s (%.2f GB/s), %.2fx"
              % (hashed / 1e9, alone, hashed / alone / 1e9, cores, together, hashed / together / 1e9, alone / together))
    finally:
        host.terminate()
        host.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
