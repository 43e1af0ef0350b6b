# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tensor parallelism in the pinned llama.cpp (b11312, --split-mode tensor): which models and worker counts it splits,
and a bound on what its busiest worker holds.

llama.cpp builds a "Meta" device over the workers (src/llama.cpp, llama_prepare_model_devices; the master's CPU is
skipped) and splits each layer's weights across them: Q, K, V, the FFN's gate and up by rows, the attention output and
the FFN's down projection by columns, the norms mirrored on every worker (src/llama-model.cpp, get_tensor_config). It
refuses some architectures outright (llm_arch_supports_sm_tensor in src/llama-arch.cpp: EXCLUDED below, compared with
the pinned source by a unit test) and needs flash attention (src/llama-context.cpp). Attention is split in whole groups
of heads that share a KV head (get_split_granularity): a cluster with more workers than the model has KV heads leaves
some workers with no attention to do, which llama.cpp accepts but which wastes them; refused here."""

from __future__ import annotations

import math
import re

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import gguf

# llm_arch_supports_sm_tensor's list, by the architecture names GGUF files carry (LLM_ARCH_NAMES).
EXCLUDED = frozenset((
    "grok", "mpt", "plamo2", "minicpm3", "gemma3n", "mamba", "mamba2", "jamba", "falcon-h1", "olmo2", "olmoe", "deepseek2",
    "deepseek32", "hy_v4", "dots3note", "glm-dsa", "bitnet", "t5", "nemotron_h", "nemotron_h_moe", "granitehybrid",
    "minimax-01", "minimax-m2", "minimax-m3", "mistral4", "kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next", "qwen3tts",
    "qwen4exp",
))


def worker_count_problem(workers, on_master=False):
    """Why tensor mode cannot share a layer among `workers` workers (and the master's own share, on_master), or None."""
    if workers + (1 if on_master else 0) < 2:
        return ("rpc_master_split_mode=tensor splits each layer across the workers, and this cluster has %d: with one "
                "worker there is nothing to share. Set rpc_master_split_mode: layer, add workers, or set "
                "rpc_master_tensor_on_master: true (the master's CPU holds a share too)." % workers)
    return None


def problems(architecture, kv_heads, workers, model_name="the model"):
    """Sentences saying why tensor mode cannot split this model over `workers` workers ([] when it can).
    kv_heads: the fewest KV heads of any attention layer (None: the model has no attention layer to count)."""
    found = []
    if architecture in EXCLUDED:
        found.append("rpc_master_split_mode=tensor: llama.cpp b11312 does not split architecture '%s' (%s) by tensors "
                     "(llm_arch_supports_sm_tensor). Set rpc_master_split_mode: layer for this model."
                     % (architecture, model_name))
    count = worker_count_problem(workers)
    if count:
        found.append(count)
    elif kv_heads is not None and kv_heads < workers:
        found.append("rpc_master_split_mode=tensor: %s has %d KV heads and llama.cpp splits attention in whole KV heads, "
                     "so %d of the %d workers would get none of it and wait on the others at every layer. Use at most %d "
                     "workers for this model, or set rpc_master_split_mode: layer."
                     % (model_name, kv_heads, workers - kv_heads, workers, kv_heads))
    return found


# The tensors llama.cpp splits, and the unit each is split in (get_split_granularity): attention in whole KV heads
# (Q, K, V by rows, the output projection by columns), the dense FFN in blocks of lcm(the type's block, 128) of its
# width, the output matrix by rows of the vocabulary. Anything else (norms, biases, experts...) is counted whole on
# every worker: a bound, never below what llama.cpp puts there.
_ATTENTION = re.compile(r"^blk\.\d+\.attn_(q|k|v|qkv|output)\.weight$")
_FFN = re.compile(r"^blk\.\d+\.ffn_(gate|up|down)\.weight$")
_LAYER = re.compile(r"^blk\.(\d+)\.")


def busiest_share(units, workers):
    """The largest part of `units` equal units that one of `workers` gets when they are shared as evenly as whole
    units allow (llama.cpp rounds each worker's end down to a unit; one worker gets the rest)."""
    if units <= 0:
        return 1.0
    return float(-(-units // workers)) / units


def worker_bounds(model, shape, workers):
    """What the busiest of `workers` holds in tensor mode, as fractions and bytes: {"weights": bytes on a worker (a
    bound), "kv_fraction": the share of the caches' bytes on a worker (a bound), "split_bytes", "whole_bytes"}.
    model: gguf.read_model's dict; shape: model_arch.shape's."""
    kv_fraction = busiest_share(shape["kv_heads_min"], workers) if shape["kv_heads_min"] else 1.0
    weights = split = whole = 0
    for tensor in model["tensors"]:
        name, size = tensor["name"], tensor["bytes"]
        layer = _LAYER.match(name)
        if name == "token_embd.weight" and not shape["tied_output"]:
            continue  # the input layer stays on the master
        if layer and int(layer.group(1)) >= shape["layers"] - shape["nextn_layers"]:
            continue  # multi-token-prediction layers are not loaded
        if _ATTENTION.match(name):
            fraction = kv_fraction
        elif _FFN.match(name):
            block = gguf.GGML_TYPES[tensor["type"]][1]
            fraction = busiest_share(shape["feed_forward_length"] // (block * 128 // math.gcd(block, 128)), workers)
        elif name in ("output.weight", "token_embd.weight"):  # a tied output is token_embd split as the output
            fraction = busiest_share(shape["vocab_size"], workers)
        else:
            weights, whole = weights + size, whole + size
            continue
        weights += int(math.ceil(size * fraction))
        split += size
    return {"weights": weights, "kv_fraction": kv_fraction, "split_bytes": split, "whole_bytes": whole}
