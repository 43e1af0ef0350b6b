"""Benchmark: tensor parallelism (rpc_master_split_mode: tensor) against the layer split, side by side in one run.

llama-server from the role's stock build and from its build with the rpc_tensor_parallel patch, over two and three
ggml-rpc-server workers on loopback at one thread each (so the workers share this machine's cores fairly), a model of
random F32 weights made here (1 GB, 4 layers: a token reads every weight once, as a 70B does). Side by side:

1. this machine's memory read rate on one core and on two at once (tests/bench/read_rate.c): the ratio two cores can
   reach at most when each reads its half of the weights;
2. generation and prompt tokens/s: layer, tensor with the stock build, tensor with the patch (median of --rounds);
3. each worker's busy share of a generated token's time (its CPU-seconds over the wall time): what the rest of the
   token (the allreduces through the master, the master's own part) leaves it; and the master's, on the same cores
   here (on a cluster of machines it has its own), with its main thread's part (the rest: its threads that relay each
   message to and from a worker, and the HTTP server's);
4. RPC messages per generated token and per worker, and the messages and bytes a load sends (GGML_RPC_DEBUG);
5. with speculative decoding on top at a fixed acceptance (--spec-synth-len 3), layer against tensor.

Prints, writes JSON; asserts nothing. docs/performance.md keeps its table.

    python -m tests.bench.tensor [--rounds 3] [--tokens 64]

Run through `make bench-tensor`.
"""

import argparse
import json
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tests.bench import spec
from tests.bench.load import cpu_seconds
from tests.bench.spec import post
from tests.tools import llama_cpp, tiny_model

PROMPT = " ".join(["The cluster reads each layer's weights on every worker at once."] * 8)
MODES = [("layer", "stock"), ("tensor", "stock"), ("tensor", "patched")]


def read_rates(work):
    """GB/s of one core reading memory, and of two cores at once (summed)."""
    binary = work / "read_rate"
    subprocess.run(["cc", "-O2", "-o", str(binary), str(Path(__file__).with_name("read_rate.c"))], check=True)
    one = float(subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout)
    pair = [subprocess.Popen([str(binary)], stdout=subprocess.PIPE, text=True) for _reader in range(2)]
    two = sum(float(process.communicate()[0]) for process in pair)
    return one, two


def server_pid(port):
    """The pid of the llama-server listening on port (llama_cpp.llama_server yields the port only)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue  # a process that ended meanwhile
        if argv[0].endswith(b"llama-server") and str(port).encode() in argv:
            return int(cmdline.parent.name)
    raise RuntimeError(f"no llama-server process listens on port {port}")


def measure(bin_dir, model, workers, mode, work, rounds, tokens, draft=None):
    """Generation and prompt tokens/s (medians), the workers' and the master's busy shares while generating (the
    master's main thread's apart), the load's seconds."""
    with llama_cpp.loopback_workers(bin_dir, workers, threads=1) as endpoints:
        options = ["-fit", "off", "--rpc", ",".join(endpoints), "-ngl", "999", "-fa", "on", "-sm", mode]
        if draft:
            options += ["--spec-type", "draft-simple", "-md", str(draft), "--spec-draft-ngl", "0",
                        "--spec-draft-n-max", "4", "--spec-synth-len", "3"]
        started = time.monotonic()
        with llama_cpp.llama_server(bin_dir, model, work / f"server-{workers}-{mode}-{bin_dir.parent.name}.log",
                                    *options) as port:
            loaded = time.monotonic() - started
            post(port, {"prompt": "Once", "n_predict": 8, "temperature": 0})  # warm
            pids, master = list(endpoints.pids.values()), server_pid(port)
            generated, prompts, busy, master_busy, main_busy = [], [], [], [], []
            for seed in range(rounds):
                before, wall = [sum(cpu_seconds(pid)) for pid in pids], time.monotonic()
                master_before, main_before = sum(cpu_seconds(master)), sum(cpu_seconds(master, master))
                timings = post(port, {"prompt": "Once upon a time", "n_predict": tokens, "temperature": 0,
                                      "cache_prompt": False, "ignore_eos": True, "seed": seed})["timings"]
                wall = time.monotonic() - wall
                busy.append(statistics.mean((sum(cpu_seconds(pid)) - was) / wall for pid, was in zip(pids, before)))
                master_busy.append((sum(cpu_seconds(master)) - master_before) / wall)
                main_busy.append((sum(cpu_seconds(master, master)) - main_before) / wall)
                generated.append(timings["predicted_per_second"])
                prompts.append(post(port, {"prompt": PROMPT, "n_predict": 1, "cache_prompt": False})
                               ["timings"]["prompt_per_second"])
    return {"generation": statistics.median(generated), "prompt": statistics.median(prompts),
            "worker_busy": statistics.median(busy), "master_busy": statistics.median(master_busy),
            "master_main_busy": statistics.median(main_busy), "load_seconds": round(loaded, 2)}


def messages(bin_dir, model, workers, mode, work, tokens=16):
    """RPC commands one worker serves: in the load (and the bytes of its set_tensor messages) and per generated token."""
    debug = work / f"debug-{workers}-{mode}-{bin_dir.parent.name}"
    debug.mkdir()
    with llama_cpp.loopback_workers(bin_dir, workers, threads=1, debug_dir=debug) as endpoints:
        options = ["-fit", "off", "--rpc", ",".join(endpoints), "-ngl", "999", "-fa", "on", "-sm", mode]
        with llama_cpp.llama_server(bin_dir, model, debug / "server.log", *options) as port:
            log = debug / f"{endpoints[0].rsplit(':', 1)[1]}.log"
            post(port, {"prompt": "Once", "n_predict": 2, "temperature": 0})
            loaded = log.read_text()
            post(port, {"prompt": "Once upon a time", "n_predict": tokens + 1, "temperature": 0, "cache_prompt": False,
                        "ignore_eos": True})
            after = log.read_text()[len(loaded):]
    load = llama_cpp.rpc_commands(loaded)
    sent = sum(int(size) for size in re.findall(r"^\[set_tensor\].*size: (\d+)", loaded, re.M))
    return {"load_messages": sum(load.values()), "load_set_tensor": load.get("set_tensor", 0), "load_bytes": sent,
            "per_token": round(sum(llama_cpp.rpc_commands(after).values()) / tokens, 1)}


# The AWS prediction's sourced inputs (docs/performance.md cites each), beside spec.py's (the README's 70B, 37.2 GiB, at
# 1.75 tokens/s with the layer split on its three instances; its Llama 3.2 1B draft): Llama 3.1 70B's 80 layers and
# 8192-wide embedding (its config.json), the README's two workers, a round trip inside one availability zone (0.25 ms,
# the best of 50 pings: xkyle.com's "Measuring AWS Region and AZ Latency"), one TCP flow's 5 Gbit/s outside a cluster
# placement group (the EC2 instance network bandwidth page).
AWS_LAYERS, AWS_EMBEDDING, AWS_WORKERS = 80, 8192, 2
MODEL_LAYERS = 4  # the bench's model
SPEC_STEP_RATIO = 1.85  # a step that checks 5 tokens against one token's, measured by make bench-spec
AWS_ROUND_TRIP_SECONDS = 0.25e-3
AWS_FLOW_BYTES_PER_SECOND = 5e9 / 8


def aws_tensor_prediction(round_trips_per_sum, step_ratio=None, length=None, nodes=AWS_WORKERS):
    """Tokens/s of the README's 70B in tensor mode over its two workers (the master's CPU holds no weights then; with
    nodes=3 it holds a third, as one more worker on its loopback): each node reads its share of the weights at the rate
    the layer split's figure implies for one node (the whole model a token, node after node), then two sums a layer
    through the master, each round_trips_per_sum round trips to the workers (measured here: the messages a token per
    worker, per sum) and its bytes over one flow (a worker's partial sum out, the total back: two n_embd F32 rows). With
    step_ratio and length (speculation: a step verifies spec.DRAFT_MAX + 1 tokens at step_ratio times one token's cost,
    measured by make bench-spec, and yields length tokens), the drafts added."""
    node_rate = spec.AWS_MODEL_BYTES * spec.AWS_TOKENS_PER_SECOND
    read = spec.AWS_MODEL_BYTES / nodes / node_rate
    sums = 2 * AWS_LAYERS * (round_trips_per_sum * AWS_ROUND_TRIP_SECONDS
                             + 2 * AWS_EMBEDDING * 4 / AWS_FLOW_BYTES_PER_SECOND)
    token = read + sums
    if step_ratio is None:
        return {"tokens_per_second": 1 / token, "read": read, "sums": sums}
    step = token * step_ratio + spec.DRAFT_MAX * spec.AWS_DRAFT_BYTES / node_rate
    return {"tokens_per_second": length / step, "read": read, "sums": sums}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "bench-tensor.json"))
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-tensor-"))
    for build in ("stock", "patched"):
        (work / build).mkdir()
    builds = {"stock": llama_cpp.role_build(work / "stock"),
              "patched": llama_cpp.role_build(work / "patched", patches=["rpc_tensor_parallel"])}
    model = tiny_model.write_model(work / "model.gguf", embd=2048, layers=MODEL_LAYERS, ff=8192, heads=16, kv_heads=4,
                                   context=2048)
    draft = tiny_model.write_model(work / "draft.gguf", embd=64, layers=1, ff=128, seed=7, context=2048)
    one, two = read_rates(work)
    print(f"model {model.stat().st_size / 1e9:.2f} GB; memory read: one core {one:.2f} GB/s, two at once {two:.2f} "
          f"GB/s (ratio {two / one:.2f}); {args.tokens} tokens a request, median of {args.rounds}", flush=True)

    rows = []
    for workers in (2, 3):
        for mode, build in MODES:
            figures = measure(builds[build], model, workers, mode, work, args.rounds, args.tokens)
            figures.update(messages(builds[build], model, workers, mode, work))
            figures.update(workers=workers, mode=mode, build=build)
            rows.append(figures)
            print(f"  {workers} workers, {mode:6} {build:7} {figures['generation']:6.2f} tokens/s, prompt "
                  f"{figures['prompt']:6.1f}/s, workers busy {figures['worker_busy']:.0%}, master "
                  f"{figures['master_busy']:.0%} (main thread {figures['master_main_busy']:.0%}), "
                  f"{figures['per_token']} messages a token, load {figures['load_seconds']} s in "
                  f"{figures['load_messages']} messages", flush=True)
    speculation = {}
    for mode, build in (("layer", "stock"), ("tensor", "patched")):
        speculation[mode] = measure(builds[build], model, 2, mode, work, args.rounds, args.tokens, draft=draft)
        print(f"  2 workers, {mode}, speculation at L=3: {speculation[mode]['generation']:.2f} tokens/s", flush=True)

    def row(workers, mode, build):
        return next(r for r in rows if (r["workers"], r["mode"], r["build"]) == (workers, mode, build))

    print("\n| workers | mode | build | tokens/s | against layer | prompt tokens/s | workers busy | master busy (main "
          "thread) | messages a token | load: s, messages, MB sent |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for figures in rows:
        layer = row(figures["workers"], "layer", "stock")
        print(f"| {figures['workers']} | {figures['mode']} | {figures['build']} | {figures['generation']:.2f} | "
              f"{figures['generation'] / layer['generation']:.2f}x | {figures['prompt']:.1f} | "
              f"{figures['worker_busy']:.0%} | {figures['master_busy']:.0%} ({figures['master_main_busy']:.0%}) | "
              f"{figures['per_token']} | {figures['load_seconds']}, "
              f"{figures['load_messages']}, {figures['load_bytes'] / 1e6:.0f} |")
    ratio = row(2, "tensor", "patched")["generation"] / row(2, "layer", "stock")["generation"]
    allowed = two / one
    print(f"\nTwo workers, tensor (patched) against layer: {ratio:.2f}x; two cores read {allowed:.2f}x one: "
          f"{ratio / allowed:.0%} of what this machine's memory allows (goal: 1.6x, or 80% of it).")
    spec_ratio = speculation["tensor"]["generation"] / speculation["layer"]["generation"]
    print(f"With speculation at L=3: layer {speculation['layer']['generation']:.2f}, tensor "
          f"{speculation['tensor']['generation']:.2f} tokens/s ({spec_ratio:.2f}x); against layer without it: "
          f"{speculation['tensor']['generation'] / row(2, 'layer', 'stock')['generation']:.2f}x")
    # each sum a round trip at least; at most every message of a token a round trip of its own
    patched = row(2, "tensor", "patched")
    most = patched["per_token"] / 2 / (2 * MODEL_LAYERS)
    print("\nPredicted for AWS (the README's 70B in tensor mode; inputs sourced, round trips a sum measured here):")
    # the master's own share, if it held one, would join each sum over its loopback: no more round trips on the network
    for nodes, holders in ((AWS_WORKERS, "the two workers"), (AWS_WORKERS + 1, "the workers and the master's CPU")):
        print(f" the weights on {holders}:")
        for trips in (1, most):
            alone = aws_tensor_prediction(trips, nodes=nodes)
            print(f"  {trips:.2f} round trips a sum: {alone['tokens_per_second']:.2f} tokens/s ({alone['read'] * 1e3:.0f} "
                  f"ms reading, {alone['sums'] * 1e3:.0f} ms summing a token; the layer split: {spec.AWS_TOKENS_PER_SECOND})")
            for name, length, _draft_bytes in spec.AWS_CASES[:2]:
                drafted = aws_tensor_prediction(trips, SPEC_STEP_RATIO, length, nodes=nodes)
                print(f"    with {name}: {drafted['tokens_per_second']:.2f} tokens/s")
    fastest = max(r["generation"] for r in rows)
    print("\n  tokens/s                 (each # = %.2f)" % (fastest / 40))
    for figures in rows:
        print("  %d workers %-6s %-7s %-40s %.2f" % (figures["workers"], figures["mode"], figures["build"],
                                                     "#" * max(1, round(40 * figures["generation"] / fastest)),
                                                     figures["generation"]))
    Path(args.out).write_text(json.dumps({"read_rate": {"one": one, "two": two}, "rows": rows,
                                          "speculation": speculation, "model_bytes": model.stat().st_size},
                                         indent=2))
    print(f"\nJSON: {args.out}")


if __name__ == "__main__":
    main()
