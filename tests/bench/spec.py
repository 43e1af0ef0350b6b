"""Benchmark: where speculative decoding pays, as a function of its acceptance, through RPC workers.

llama-server from the role's build for this machine, with a model of a few hundred MB made here (its weights random, so
real drafts would all be rejected) and a small draft of the same vocabulary, on the master alone and over one and two
ggml-rpc-server workers on loopback. The acceptance is fixed with llama.cpp's benchmarking switch --spec-synth-len L (the
mean tokens per verification step, the target's own included): the draft still runs, the model still checks every draft
in one step, only the verdict is drawn at random (the text is not valid, the timing is). Side by side in one run:

1. generation tokens/s without speculation and at L = 1.5, 2, 3, 4, for 0, 1 and 2 workers, median of --rounds;
2. the gain (tokens/s with / without) against L as a table and a chart;
3. the round trip's share of a token's time: 1 - (master alone's time per token) / (the cluster's), without speculation;
4. one concurrency level beside it: --clients streams at once, without speculation and at L = 3 (aggregate tokens/s).

On this machine the "workers" share the master's cores and memory: the round trips are loopback ones, the compute is
not spread. The AWS prediction built on these ratios is in docs/performance.md. Prints, writes JSON; asserts nothing.

    python -m tests.bench.spec [--rounds 3] [--tokens 128] [--layers 8] [--embd 1024] [--clients 4]

Run through `make bench-spec`.
"""

import argparse
import json
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from tests.tools import llama_cpp, tiny_model

LENGTHS = [1.5, 2.0, 3.0, 4.0]
DRAFT_MAX = 4  # --spec-synth-len takes 1 to DRAFT_MAX + 1
PROMPT = "The cluster answers the question about speculative decoding with"


def post(port, body, timeout=600):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.loads(answer.read())


class Server:
    """llama-server over the given workers, with or without speculation at a synthetic acceptance length."""

    def __init__(self, bin_dir, model, draft, endpoints, length, slots, log):
        self.port = llama_cpp.free_port()
        argv = [str(bin_dir / "llama-server"), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
                "-c", str(2048 * slots), "-np", str(slots), "-fit", "off", "--metrics"]
        if endpoints:
            argv += ["--rpc", ",".join(endpoints), "-ngl", "999"]
        if length:
            argv += ["--spec-type", "draft-simple", "-md", str(draft), "--spec-draft-ngl", "0",
                     "--spec-draft-n-max", str(DRAFT_MAX), "--spec-synth-len", str(length)]
        self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        if not llama_cpp.wait_for_health(self.port, self.process):
            raise RuntimeError("llama-server exited: " + " ".join(argv))

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)

    def generate(self, tokens, seed):
        body = {"prompt": PROMPT, "n_predict": tokens, "temperature": 0, "cache_prompt": False, "seed": seed,
                "ignore_eos": True}
        timings = post(self.port, body)["timings"]
        return {"tokens_per_second": timings["predicted_per_second"], "ms_per_token": timings["predicted_per_token_ms"]}

    def acceptance_length(self):
        """1 + accepted / verification steps, from llama-server's /metrics (1.0 without speculation)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        counters = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                    if line.startswith("llamacpp:spec_decode_num_")}
        steps = counters.get("llamacpp:spec_decode_num_drafts_total", 0)
        return round(1 + counters.get("llamacpp:spec_decode_num_accepted_tokens_total", 0) / steps, 2) if steps else 1.0

    def concurrent(self, clients, tokens):
        results, started = [], time.monotonic()

        def one(seed):
            results.append(self.generate(tokens, seed))
        threads = [threading.Thread(target=one, args=(seed,)) for seed in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return clients * tokens / (time.monotonic() - started)


# The AWS prediction's sourced inputs (docs/performance.md cites each): the README's Llama 3.1 70B Q4_0 (37.2 GiB) at
# 1.75 tokens/s on its three Graviton instances (the project's own figure for that cluster, issue 76), a Llama 3.2 1B draft
# (1.24 B weights, from its config.json) in Q4_0 (18 bytes per 32 weights, ggml's block_q4_0), and the acceptance
# lengths published for draft pairs in llama.cpp's own threads and for EAGLE-3 on Llama 3.3 70B.
AWS_TOKENS_PER_SECOND = 1.75
AWS_MODEL_BYTES = 37.2 * 2**30
Q4_0 = 18 / 32  # bytes a weight
AWS_DRAFT_BYTES = 1.24e9 * Q4_0
# An EAGLE-3 head for the 70B (the EAGLE-3 paper, arXiv 2503.01840): one decoder layer of the 70B's own width (one of
# its 80, Llama 3.3 70B's config.json), the fusion of three of its hidden states (3 x 8192 -> 8192) and a head over at
# most its 128,256-token vocabulary; in Q4_0, an upper bound (its released heads use a smaller draft vocabulary).
AWS_EAGLE3_BYTES = AWS_MODEL_BYTES / 80 + (3 * 8192 * 8192 + 128256 * 8192) * Q4_0
# A chain of DRAFT_MAX drafted tokens accepts at most DRAFT_MAX + 1 a step: EAGLE-3's published 5.88 (a tree of 64
# drafts on MT-bench: the paper's Table 1, sglang #4716) is above it, so the chain's ceiling stands for it.
AWS_CASES = [
    ("Llama 3.2 1B draft, L = 4.58 (Llama 3.1 8B + 3.2 1B, llama.cpp #5877)", 4.58, AWS_DRAFT_BYTES),
    ("Llama 3.2 1B draft, L = 1.57 (Llama 2 70B + 7B, CPU, llama.cpp #2926)", 1.57, AWS_DRAFT_BYTES),
    ("ngram-mod on code edits, L = 1.59 (llama.cpp #22168)", 1.59, 0),
    ("EAGLE-3 head, L = %d (its 5.88 on MT-bench, arXiv 2503.01840, above a %d-token chain's ceiling)"
     % (DRAFT_MAX + 1, DRAFT_MAX), min(5.88, DRAFT_MAX + 1), AWS_EAGLE3_BYTES),
    ("EAGLE-3 head, L = 2.42 (Llama 3.3 70B, one prompt without MT-bench's system prompt, sglang #4716)", 2.42,
     AWS_EAGLE3_BYTES),
]


def aws_prediction(step_ratio, draft_max=DRAFT_MAX):
    """Tokens/s of the README's 70B with speculation: a step verifies draft_max + 1 tokens at step_ratio times one
    token's step (measured here), plus draft_max draft tokens read at the rate the cluster's own step reads its weights
    (each node reads its share in turn: the whole model in one step's time, a lower bound on the master's rate).
    Returns ({case: seconds a drafted token}, rows)."""
    step = 1 / AWS_TOKENS_PER_SECOND
    read_rate = AWS_MODEL_BYTES / step
    rows, draft_seconds = [], {}
    for name, length, draft_bytes in AWS_CASES:
        draft_seconds[name] = draft_bytes / read_rate
        seconds = step * step_ratio + draft_max * draft_seconds[name]
        rows.append((name, length, length / seconds, length / seconds / AWS_TOKENS_PER_SECOND))
    return draft_seconds, rows


def chart(rows, width=40):
    """The gain against L, one bar per (workers, L)."""
    top = max(row["gain"] for row in rows)
    lines = []
    for row in rows:
        drawn = "#" * max(1, round(width * row["gain"] / top))
        lines.append("  %d worker(s) L=%-4s %-*s %.2fx" % (row["workers"], row["length"], width, drawn, row["gain"]))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--embd", type=int, default=1024)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "bench-spec.json"))
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-spec-"))
    (work / "build").mkdir()
    bin_dir = llama_cpp.role_build(work / "build")
    model = tiny_model.write_model(work / "model.gguf", embd=args.embd, layers=args.layers, ff=args.embd * 11 // 4,
                                   heads=max(4, args.embd // 128), kv_heads=max(2, args.embd // 512), context=4096)
    draft = tiny_model.write_model(work / "draft.gguf", embd=64, layers=1, ff=128, seed=7, context=4096)
    print(f"model {model.stat().st_size / 1e6:.0f} MB, draft {draft.stat().st_size / 1e6:.1f} MB, "
          f"{args.tokens} tokens per request, median of {args.rounds}")

    measured = {}
    log = open(work / "llama-server.log", "w")
    for workers in (0, 1, 2):
        with llama_cpp.loopback_workers(bin_dir, workers) as endpoints:
            for length in [None] + LENGTHS:
                server = Server(bin_dir, model, draft, endpoints, length, 1, log)
                try:
                    server.generate(16, 0)  # warm: the first request pays for the caches
                    runs = [server.generate(args.tokens, seed) for seed in range(args.rounds)]
                    length_seen = server.acceptance_length()
                finally:
                    server.stop()
                figures = {"tokens_per_second": statistics.median(run["tokens_per_second"] for run in runs),
                           "ms_per_token": statistics.median(run["ms_per_token"] for run in runs),
                           "measured_length": length_seen}
                measured[(workers, length)] = figures
                print(f"  {workers} worker(s), L={length or '-':<4} {figures['tokens_per_second']:7.1f} tokens/s "
                      f"(measured L {figures['measured_length']})", flush=True)
            concurrency = {}
            for length in (None, 3.0):
                server = Server(bin_dir, model, draft, endpoints, length, args.clients, log)
                try:
                    server.generate(16, 0)
                    concurrency[length] = statistics.median(server.concurrent(args.clients, args.tokens)
                                                            for _round in range(args.rounds))
                finally:
                    server.stop()
            measured[(workers, "clients")] = concurrency

    rows = []
    print("\n| workers | round trip's share of a token | no speculation tokens/s | " + " | ".join(
        f"L={length}" for length in LENGTHS) + f" | {args.clients} clients, none -> L=3 |")
    print("|---:|---:|---:|" + "---:|" * len(LENGTHS) + "---:|")
    alone = measured[(0, None)]["ms_per_token"]
    for workers in (0, 1, 2):
        base = measured[(workers, None)]
        share = 1 - alone / base["ms_per_token"] if workers else 0.0
        cells = []
        for length in LENGTHS:
            gain = measured[(workers, length)]["tokens_per_second"] / base["tokens_per_second"]
            rows.append({"workers": workers, "length": length, "gain": round(gain, 3),
                         "tokens_per_second": round(measured[(workers, length)]["tokens_per_second"], 2),
                         "measured_length": measured[(workers, length)]["measured_length"]})
            cells.append(f"{gain:.2f}x")
        clients = measured[(workers, "clients")]
        print(f"| {workers} | {share:.0%} | {base['tokens_per_second']:.1f} | " + " | ".join(cells)
              + f" | {clients[None]:.1f} -> {clients[3.0]:.1f} ({clients[3.0] / clients[None]:.2f}x) |")
        for row in rows[-len(LENGTHS):]:
            row["round_trip_share"] = round(share, 3)
    print("\nGain (tokens/s with speculation / without) against the acceptance length L:")
    print(chart(rows))
    # a verification step's cost against one token's, through two workers: L tokens per step at gain x the tokens/s
    step_ratio = statistics.median(row["measured_length"] / row["gain"] for row in rows if row["workers"] == 2)
    draft_seconds, predicted = aws_prediction(step_ratio)
    print(f"\nA step that checks {DRAFT_MAX + 1} tokens costs {step_ratio:.2f}x one token's through two workers (measured "
          f"here). Predicted for the README's 70B at {AWS_TOKENS_PER_SECOND} tokens/s, each draft's drafted token read on "
          f"the master at the cluster's rate:")
    for name, length, tokens_per_second, gain in predicted:
        print(f"  {name}: draft {draft_seconds[name] * 1000:.0f} ms a token, {tokens_per_second:.2f} tokens/s ({gain:.2f}x)")
    Path(args.out).write_text(json.dumps({"rows": rows, "clients": args.clients, "tokens": args.tokens,
                                          "step_ratio": step_ratio,
                                          "aws": [dict(zip(("case", "length", "tokens_per_second", "gain"), row))
                                                  for row in predicted],
                                          "model_bytes": model.stat().st_size,
                                          "concurrency": {str(workers): {str(length): value for length, value in
                                                                         measured[(workers, "clients")].items()}
                                                          for workers in (0, 1, 2)}}, indent=2))
    print(f"\nJSON: {args.out}")


if __name__ == "__main__":
    main()
