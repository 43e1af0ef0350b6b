# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Figures from llama.cpp's log (llama-completion, llama-server at -lv 4): timings, buffer sizes per
device, system_info. Lines look like:

    load_tensors: RPC0[10.0.1.11:50052] model buffer size =   612.35 MiB
    llama_kv_cache: RPC0[10.0.1.11:50052] KV buffer size =    64.00 MiB
    llama_memory_recurrent: RPC0[10.0.1.11:50052] RS buffer size =     2.10 MiB   (a recurrent layer's state)
    sched_reserve: RPC0[10.0.1.11:50052] compute buffer size =     1.64 MiB
    common_perf_print:        load time =      17.66 ms
    common_perf_print: prompt eval time =       2.71 ms /     5 tokens (  0.54 ms per token,  1843.66 tokens per second)
    common_perf_print:        eval time =      11.70 ms /     7 runs   (  1.67 ms per token,   598.34 tokens per second)
"""

from __future__ import annotations

import math
import re

_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
_BUFFER = re.compile(r"(RPC\d+\[(?P<endpoint>[^\]]+)\]|(?P<local>CPU(?:_\w+)?))\s+(?P<kind>model|KV|RS|compute|output) buffer size =\s+"
                     r"(?P<size>[\d.]+) (?P<unit>B|KiB|MiB|GiB)")
_LOAD = re.compile(r"common_perf_print:\s+load time =\s+([\d.]+) ms")
# Rates print as "inf" when a phase took 0.00 ms (one generated token, for example).
_PROMPT = re.compile(r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens \(.*?([\d.]+|inf|nan) tokens per second")
_EVAL = re.compile(r"\s eval time =\s+([\d.]+) ms /\s+(\d+) runs\s+\(.*?([\d.]+|inf|nan) tokens per second")


def _rate(text):
    """Tokens per second, or None when llama.cpp could not measure it (inf, nan)."""
    value = float(text)
    return value if math.isfinite(value) else None


def perf(log_text):
    """Timings: load_ms, prompt_ms/prompt_tokens/prompt_tps, eval_ms/eval_runs/eval_tps (those present)."""
    figures = {}
    load = _LOAD.search(log_text)
    prompt = _PROMPT.search(log_text)
    generation = _EVAL.search(log_text)
    if load:
        figures["load_ms"] = float(load.group(1))
    if prompt:
        figures.update(prompt_ms=float(prompt.group(1)), prompt_tokens=int(prompt.group(2)), prompt_tps=_rate(prompt.group(3)))
    if generation:
        figures.update(eval_ms=float(generation.group(1)), eval_runs=int(generation.group(2)), eval_tps=_rate(generation.group(3)))
    return figures


def buffers(log_text):
    """{device: {"model": bytes, "KV": bytes, "RS": bytes, "compute": bytes, "output": bytes}} (those logged; a
    sliding-window model logs two KV buffers per device, added up); RPC devices are named by their endpoint
    (the RPC index is the device's index on its worker, so every worker's first device is RPC0)."""
    found = {}
    for match in _BUFFER.finditer(log_text):
        device = match.group("endpoint") or match.group("local")
        size = int(float(match.group("size")) * _UNITS[match.group("unit")])
        kinds = found.setdefault(device, {})
        kinds[match.group("kind")] = kinds.get(match.group("kind"), 0) + size
    return found


def system_info_line(log_text):
    """The system_info line ('system_info: ... | CPU : NEON = 1 | SVE_CNT = 16 | ...'), from its label on; '' if none."""
    line = re.search(r"system_info:.*", log_text)
    return line.group(0).strip() if line else ""


def system_info(log_text):
    """{feature: value} from the system_info line."""
    return dict(re.findall(r"([A-Z0-9_]+) = (\w+)", system_info_line(log_text)))


def complete(log_text):
    """Whether the run's log reached its final timing lines. llama-completion sometimes exits 0 having
    lost its last output lines (an unflushed logger); such a run must not count as a result."""
    return "eval_runs" in perf(log_text)
