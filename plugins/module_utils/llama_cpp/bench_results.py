# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark results of a deployed cluster: parse llama-bench's output, write the Markdown report,
draw the chart, compare two result files.

A result file (JSON) holds:
    runs:    [{workers: 0..N (0 = the master alone), test: "pp512"|"tg128", n_prompt, n_gen,
               tokens_per_second, stddev, n_threads, n_gpu_layers}]
    load:    per cache state (cold, staged, warm): <state>_ms, <state>_bytes_sent, <state>_mbit_per_s and
             <state>_cache_bytes_written (measured); master_read_hash_ms and hashed_bytes (the master's own part of every
             load, measured), worker_cache_write_mb_s (measured), staging_ms and staging_bytes (the staging before the
             staged load), predicted_ms (rpc_master's prediction per state); breakdown and summary, worked out here
             from those (load_breakdown)
    network: {raw_tcp_mbit_per_s, tool (what measured it, e.g. iperf 3.12), path}
    concurrency: {slots, requests_per_client, max_tokens, levels: [{clients, requests, failed, completion_tokens, seconds,
             tokens_per_second, ttft_ms_p50, ttft_ms_p95, latency_ms_p50, latency_ms_p95}]} (llama_server_bench)
    cluster, build, model, settings, started_at, finished_at
"""

from __future__ import annotations

import json


class BenchError(ValueError):
    """Output or a result file this code cannot read."""


def parse_llama_bench(text):
    """llama-bench -o json (a list) or -o jsonl (one object per line) -> rows of the figures we keep."""
    text = text.strip()
    if not text:
        raise BenchError("llama-bench printed nothing on stdout")
    try:
        records = json.loads(text) if text.startswith("[") else [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as error:
        raise BenchError("llama-bench output is not JSON (run it with -o json): %s" % error)
    rows = []
    for record in records:
        try:
            n_prompt, n_gen = int(record["n_prompt"]), int(record["n_gen"])
            rows.append({
                "test": ("pp%d" % n_prompt if n_prompt else "") + ("tg%d" % n_gen if n_gen else ""),
                "n_prompt": n_prompt,
                "n_gen": n_gen,
                "tokens_per_second": round(float(record["avg_ts"]), 3),
                "stddev": round(float(record["stddev_ts"]), 3),
                "samples": len(record.get("samples_ts") or []),
                "n_threads": int(record["n_threads"]),
                "n_gpu_layers": int(record["n_gpu_layers"]),
                "model_size": int(record["model_size"]),
                "build": "%s (%s)" % (record.get("build_number"), record.get("build_commit")),
            })
        except (KeyError, TypeError, ValueError) as error:
            raise BenchError("a llama-bench record lacks %s: %r" % (error, record))
    return rows


def _runs_by_test(results):
    table = {}
    for run in results.get("runs", []):
        table.setdefault(run["test"], {})[run["workers"]] = run["tokens_per_second"]
    return table


LOAD_STATES = ("cold", "staged", "warm")
LOAD_PARTS = ("master_read_hash_ms", "transfer_ms", "worker_cache_write_ms", "other_ms")


def load_breakdown(load, raw_tcp_mbit_per_s, model_bytes, workers):
    """Each measured load split into the master's read and hash (measured once, the same in every load), the transfer
    (the bytes the master sent, at the raw TCP rate measured on the same path), the workers' cache writes (the bytes
    their caches grew by, at the write rate measured in a cache directory) and the rest (RPC round trips, buffers,
    the context), which is what the three measured parts leave; and the figures the first-load goal is judged on."""
    breakdown = {}
    for state in LOAD_STATES:
        if state + "_ms" not in load:
            continue
        parts = {"master_read_hash_ms": float(load.get("master_read_hash_ms", 0)),
                 "transfer_ms": load[state + "_bytes_sent"] * 8 / (raw_tcp_mbit_per_s * 1e3) if raw_tcp_mbit_per_s else 0.0,
                 "worker_cache_write_ms": (load.get(state + "_cache_bytes_written", 0) / (load["worker_cache_write_mb_s"] * 1e3)
                                           if load.get("worker_cache_write_mb_s") else 0.0)}
        parts["other_ms"] = load[state + "_ms"] - sum(parts.values())
        breakdown[state] = {name: round(value, 1) for name, value in parts.items()}
    summary = {}
    if "staged_ms" in load and load.get("cold_ms"):
        summary["staged_over_cold"] = round(load["staged_ms"] / load["cold_ms"], 3)
    if "staged_bytes_sent" in load and model_bytes:
        summary["staged_sent_fraction_of_model"] = round(load["staged_bytes_sent"] / model_bytes, 4)
    for state, predicted in sorted((load.get("predicted_ms") or {}).items()):
        if load.get(state + "_ms") and predicted:
            summary[state + "_measured_over_predicted"] = round(load[state + "_ms"] / predicted, 2)
    if load.get("staging_ms") and load.get("staging_bytes"):
        summary["staging_mbit_per_s"] = round(load["staging_bytes"] * 8 / (load["staging_ms"] * 1e3), 1)
        if raw_tcp_mbit_per_s and workers:
            # Every path is taken to run at the rate measured on the first (one bridge or one placement group).
            summary["staging_fraction_of_raw_tcp_summed"] = round(summary["staging_mbit_per_s"] / (raw_tcp_mbit_per_s * workers), 3)
    return breakdown, summary


def markdown(results):
    """The report as Markdown: tokens/s per test and worker count, load times, the network figures."""
    table = _runs_by_test(results)
    counts = sorted({run["workers"] for run in results.get("runs", [])})
    label = {0: "master alone"}
    lines = ["# Cluster benchmark", ""]
    model = results.get("model", {})
    lines.append("Model `%s` (%.1f MB), llama.cpp %s, %d worker(s); finished %s." % (
        model.get("path", "?"), model.get("file_size", 0) / 1e6, results.get("build", {}).get("version", "?"),
        len(results.get("cluster", {}).get("workers", [])), results.get("finished_at", "?")))
    lines += ["", "## Tokens per second", "",
              "| Test | " + " | ".join(label.get(count, "%d worker%s" % (count, "s" if count > 1 else "")) for count in counts) + " |",
              "|---|" + "---:|" * len(counts)]
    for test in sorted(table, key=lambda name: (not name.startswith("pp"), name)):
        cells = ["%.2f" % table[test][count] if count in table[test] else "-" for count in counts]
        lines.append("| %s | %s |" % (test, " | ".join(cells)))
    load = results.get("load")
    if load:
        breakdown = load.get("breakdown", {})
        lines += ["", "## Model load", "",
                  "| Worker cache | Load (ms) | Bytes the master sent | Effective rate (Mbit/s) | Bytes into the caches "
                  "| Master read + hash (ms) | Transfer (ms) | Cache writes (ms) | Rest (ms) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for state in LOAD_STATES:
            if state + "_ms" not in load:
                continue
            parts = breakdown.get(state, {})
            lines.append("| %s | %.0f | %d | %.0f | %s | %s |" % (
                state, load[state + "_ms"], load[state + "_bytes_sent"], load.get(state + "_mbit_per_s", 0),
                load.get(state + "_cache_bytes_written", "-"),
                " | ".join("%.0f" % parts[part] if part in parts else "-" for part in LOAD_PARTS)))
        if breakdown:
            lines += ["", "Measured: the loads, the bytes, the master's read and hash (%d bytes), the raw TCP rate and the "
                      "workers' cache write rate (%s MB/s). Worked out from them: transfer = bytes sent at the raw TCP rate, "
                      "cache writes = bytes into the caches at that write rate, rest = what the three leave."
                      % (load.get("hashed_bytes", 0), load.get("worker_cache_write_mb_s", "-"))]
        predicted = load.get("predicted_ms") or {}
        if predicted:
            lines += ["", "Against the load-time model (rpc_master's prediction for this plan, with rpc_master_load_rates):", "",
                      "| Worker cache | Measured (ms) | Predicted (ms) | Measured / predicted |", "|---|---:|---:|---:|"]
            ratios = load.get("summary", {})
            lines += ["| %s | %.0f | %.0f | %s |" % (state, load[state + "_ms"], predicted[state],
                                                     ratios.get(state + "_measured_over_predicted", "-"))
                      for state in LOAD_STATES if state + "_ms" in load and state in predicted]
        summary = {name: value for name, value in load.get("summary", {}).items() if not name.endswith("_measured_over_predicted")}
        if summary:
            lines += [""] + ["- %s: %s" % (name.replace("_", " "), value) for name, value in sorted(summary.items())]
    lines += concurrency_markdown(results.get("concurrency"))
    network = results.get("network")
    if network:
        raw = "Raw TCP on the same path (%s, %s): %.0f Mbit/s." % (
            network.get("path", "master -> worker"), network.get("tool", "measured"), network["raw_tcp_mbit_per_s"])
        if (load or {}).get("cold_mbit_per_s"):
            raw += " The cold load moved the model at %.0f Mbit/s, %.0f%% of that." % (
                load["cold_mbit_per_s"], 100 * network.get("load_fraction_of_line_rate", 0))
        lines += ["", "## Network", "", raw]
    return "\n".join(lines) + "\n"


def scaling(concurrency):
    """Aggregate generation rate at each number of clients over the rate with one client: {clients: ratio}."""
    by_clients = {level["clients"]: level["tokens_per_second"] for level in (concurrency or {}).get("levels", [])}
    if not by_clients.get(1):
        return {}
    return {clients: round(rate / by_clients[1], 2) for clients, rate in sorted(by_clients.items())}


def concurrency_markdown(concurrency):
    if not concurrency or not concurrency.get("levels"):
        return []
    ratios = scaling(concurrency)

    def cell(value, form="%.0f"):
        return "-" if value is None else form % value

    lines = ["", "## Concurrent clients", "",
             "llama-server with %s slot(s); each client sends %d streaming chat completion(s) of %d tokens, one after another."
             % (concurrency.get("slots", "?"), concurrency.get("requests_per_client", 0), concurrency.get("max_tokens", 0)),
             "",
             "| Clients | Requests | Failed | Generation tok/s (all clients) | / 1 client | Time to first token p50 (ms) "
             "| p95 (ms) | Request p50 (ms) | p95 (ms) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for level in concurrency["levels"]:
        lines.append("| %d | %d | %d | %.2f | %s | %s | %s | %s | %s |" % (
            level["clients"], level["requests"], level["failed"], level["tokens_per_second"],
            cell(ratios.get(level["clients"]), "%.2f"), cell(level["ttft_ms_p50"]), cell(level["ttft_ms_p95"]),
            cell(level["latency_ms_p50"]), cell(level["latency_ms_p95"])))
    return lines


def compare(before, after):
    """Ratios after/before for every figure both files have; returns (rows, text)."""
    rows = []
    table_before, table_after = _runs_by_test(before), _runs_by_test(after)
    for test in sorted(set(table_before) & set(table_after)):
        for count in sorted(set(table_before[test]) & set(table_after[test])):
            rows.append(("%s, %s tokens/s" % (test, "master alone" if count == 0 else "%d worker%s" % (count, "s" * (count > 1))),
                         table_before[test][count], table_after[test][count]))
    for key in ("cold_ms", "staged_ms", "warm_ms", "cold_bytes_sent", "staged_bytes_sent"):
        if key in before.get("load", {}) and key in after.get("load", {}):
            rows.append(("load " + key, before["load"][key], after["load"][key]))
    rates_before, rates_after = ({level["clients"]: level["tokens_per_second"] for level in
                                  (results.get("concurrency") or {}).get("levels", [])} for results in (before, after))
    for clients in sorted(set(rates_before) & set(rates_after)):
        rows.append(("llama-server, %d client%s, tokens/s" % (clients, "s" * (clients > 1)), rates_before[clients], rates_after[clients]))
    if "raw_tcp_mbit_per_s" in before.get("network", {}) and "raw_tcp_mbit_per_s" in after.get("network", {}):
        # results of development versions before 0.1.0 name no tool: a Python sender measured them
        tools = [results["network"].get("tool", "a Python sender") for results in (before, after)]
        rows.append(("raw TCP Mbit/s" + ("" if tools[0] == tools[1] else " (%s -> %s: another tool)" % tuple(tools)),
                     before["network"]["raw_tcp_mbit_per_s"], after["network"]["raw_tcp_mbit_per_s"]))
    if not rows:
        raise BenchError("the two result files have no figure in common")
    result = [{"figure": name, "before": old, "after": new, "ratio": round(float(new) / old, 3) if old else None}
              for name, old, new in rows]
    width = max(len(row["figure"]) for row in result)
    text = "\n".join("%-*s  %12.2f -> %12.2f  x%s" % (width, row["figure"], row["before"], row["after"], row["ratio"])
                     for row in result)
    return result, text


def chart(results, path):
    """PNG: tokens/s against the number of workers (one line per test) and the load times."""
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    table = _runs_by_test(results)
    figure, (speed, load, clients) = plt.subplots(1, 3, figsize=(16, 4.2))
    for test, by_count in sorted(table.items()):
        counts = sorted(count for count in by_count if count > 0)
        speed.plot(counts, [by_count[count] for count in counts], marker="o", label=test)
        if 0 in by_count:
            speed.axhline(by_count[0], linestyle="--", linewidth=1, color=speed.lines[-1].get_color(),
                          label="%s, master alone" % test)
    speed.set_xlabel("RPC workers")
    speed.set_ylabel("tokens/s (log scale)")
    speed.set_yscale("log")  # prompt processing runs an order of magnitude above generation
    speed.set_title("Speed against the number of workers")
    speed.xaxis.get_major_locator().set_params(integer=True)
    speed.legend(fontsize=8)
    if results.get("load"):
        figures = results["load"]
        states = [state for state in LOAD_STATES if state + "_ms" in figures]
        breakdown = figures.get("breakdown", {})
        if breakdown:  # stacked: the parts of each load
            bottoms = [0.0] * len(states)
            for part, colour in zip(LOAD_PARTS, ("#4c72b0", "#c44e52", "#dd8452", "#8c8c8c")):
                heights = [max(breakdown[state][part], 0.0) for state in states]
                load.bar(states, heights, bottom=bottoms, color=colour, label=part[:-3].replace("_", " "))
                bottoms = [bottom + height for bottom, height in zip(bottoms, heights)]
            load.legend(fontsize=8)
        else:
            load.bar(states, [figures["%s_ms" % state] for state in states], color="#55a868")
        load.set_ylabel("ms")
        load.set_title("Model load by worker cache state")
    else:
        load.set_axis_off()
    levels = (results.get("concurrency") or {}).get("levels", [])
    if levels:  # the aggregate rate against the clients, and the time to the first token on its own axis
        counts = [level["clients"] for level in levels]
        clients.plot(counts, [level["tokens_per_second"] for level in levels], marker="o", color="#55a868",
                     label="generation tok/s, all clients")
        clients.set_xlabel("concurrent clients")
        clients.set_ylabel("tokens/s")
        clients.set_xscale("log", base=2)
        clients.set_xticks(counts, [str(count) for count in counts])
        first_token = clients.twinx()
        first_token.plot(counts, [level["ttft_ms_p95"] or 0 for level in levels], marker="s", linestyle="--",
                         color="#c44e52", label="time to first token p95")
        first_token.set_ylabel("ms")
        clients.legend(handles=clients.lines + first_token.lines, fontsize=8, loc="upper left")
        clients.set_title("llama-server with concurrent clients")
    else:
        clients.set_axis_off()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
