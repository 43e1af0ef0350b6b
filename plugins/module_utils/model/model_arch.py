# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What llama.cpp b11312 makes of a model's header: its layers, the tensors it loads for each, and each layer's cache.

The authority on memory is llama.cpp itself (llama_fit.py runs its projection); this is the part the collection
needs without running it: which tensor goes to which node (the staging of the workers' caches depends on it), and a
first estimate where llama.cpp cannot run (the controller, a master without a build yet). It mirrors:
- the layers: block_count counts the multi-token-prediction ("nextn") layers at the end, whose tensors are not loaded
  unless MTP speculative decoding is on (TENSOR_SKIP in the architectures' load_arch_tensors), and that hold no KV
  cache (the layer filter in llama_model::create_memory);
- the output: output.weight, or when the model has none (tied embeddings) a copy of token_embd (TENSOR_DUPLICATED)
  on the output layer's device (on the master's CPU, where token_embd itself stays (dev_input), only when the copy
  takes another buffer type: weights llama.cpp repacks for the CPU);
- each layer's cache, from llama-hparams.cpp: K of n_embd_head_k x n_head_kv and V of n_embd_head_v x n_head_kv values
  per token (f16), per sequence unless the cache is unified; sliding-window layers hold only the window
  (llama-kv-cache-iswa.cpp); MLA layers a K cache only; recurrent layers a fixed state per sequence
  (llama-memory-recurrent.cpp, f32).
Architectures outside FAMILIES are not modelled (their caches differ: DSA, MSA, per-layer sharing...): the plan then
takes llama.cpp's projection, and without it refuses, rather than plan them as if they were LLaMA.
"""

from __future__ import annotations

import re

KV_BYTES = 2  # the K and V caches are f16 (llama-server's -ctk/-ctv default)
STATE_BYTES = 4  # recurrent states are f32
PAD = 256  # llama_context pads n_ctx and n_ctx_seq to 256; the sliding-window cache too
UBATCH = 512  # llama.cpp's default -ub

# Architecture -> what its hparams loader sets beyond the generic keys (checked against llama.cpp's own projection by
# tests/integration/test_plan_against_llama_cpp.py, one real model shape of each).
FAMILIES = {
    "llama": {},
    "qwen3moe": {},
    # LLM_ARCH_OPENAI_MOE: every other layer slides over attention.sliding_window tokens
    "gpt-oss": {"swa_pattern": 2},
    # 5 of 6 layers slide, when the model states a window
    "gemma3": {"swa_pattern": 6},
    # DeepSeek V2/V3, Kimi K2: MLA (a K cache of kv_lora_rank + the rope dims, no V), an MTP layer at the end
    "deepseek2": {},
    # gated delta net (recurrent) layers, every full_attention_interval-th layer attention
    "qwen3next": {"recurrent": "full_attention_interval"},
}

_LAYER = re.compile(r"^blk\.(\d+)\.")


class ArchError(ValueError):
    """The header lacks what its architecture needs."""


def _per_layer(value, count, default):
    """A metadata value that may be one number or one per layer (get_key_or_arr)."""
    if value is None:
        return [default] * count
    if isinstance(value, list):
        if len(value) != count:
            raise ArchError("a per-layer value has %d entries for %d layers" % (len(value), count))
        return [int(item) for item in value]
    if isinstance(value, dict):  # an array too long to keep
        raise ArchError("a per-layer value of %s entries" % value.get("array_length"))
    return [int(value)] * count


def shape(model):
    """The figures a plan needs, from read_model's dict."""
    metadata = model["metadata"]
    arch = metadata.get("general.architecture")
    if not arch:
        raise ArchError("the model has no general.architecture: not a llama.cpp model file")

    def key(name, default=None):
        return metadata.get("%s.%s" % (arch, name), default)

    def number(name, default=None):
        value = key(name, default)
        if value is None:
            raise ArchError("the model's metadata lacks %s.%s" % (arch, name))
        if isinstance(value, list):
            value = max(value)
        return int(value)

    layers = number("block_count")
    nextn = number("nextn_predict_layers", 0)
    trunk = layers - nextn
    embd = number("embedding_length")
    heads = _per_layer(key("attention.head_count"), layers, 0)
    kv_heads = _per_layer(key("attention.head_count_kv"), layers, None)
    kv_heads = [heads[il] if value is None else value for il, value in enumerate(kv_heads)]
    head_count = max(heads) if heads else 0
    head_k = number("attention.key_length", embd // head_count if head_count else 0)
    head_v = number("attention.value_length", embd // head_count if head_count else 0)
    head_k_swa = number("attention.key_length_swa", head_k)
    head_v_swa = number("attention.value_length_swa", head_v)
    family = FAMILIES.get(arch)

    # sliding-window layers (load_swa_pattern: an array, else a pattern of n: the last of every n is full)
    window = number("attention.sliding_window", 0)
    swa = [False] * layers
    if family is not None and "swa_pattern" in family and window > 0:
        pattern = key("attention.sliding_window_pattern", family["swa_pattern"])
        if isinstance(pattern, list):
            swa = [bool(item) for item in _per_layer(pattern, layers, 0)]
        else:
            swa = [int(pattern) == 0 or il % int(pattern) < int(pattern) - 1 for il in range(trunk)] + [False] * nextn
    # recurrent layers (qwen3next: attention every full_attention_interval-th layer)
    recurrent = [False] * layers
    state_per_sequence = 0
    if family is not None and family.get("recurrent"):
        given = key("attention.recurrent_layers")
        if isinstance(given, list):
            recurrent = [bool(item) for item in _per_layer(given, layers, 0)]
        else:
            interval = number("full_attention_interval", 4)
            recurrent = [il < trunk and (il + 1) % interval != 0 for il in range(layers)]
        d_conv, d_inner = number("ssm.conv_kernel"), number("ssm.inner_size")
        d_state, groups = number("ssm.state_size"), number("ssm.group_count")
        # n_embd_r (the conv state) + n_embd_s (the SSM state), f32, per sequence
        state_per_sequence = STATE_BYTES * ((d_conv - 1) * (d_inner + 2 * groups * d_state) + d_state * d_inner)
    mla = key("attention.key_length_mla") is not None and key("attention.value_length_mla") is not None

    kv = []
    for il in range(layers):
        if il >= trunk:
            kv.append(None)  # MTP layers: filtered out of the main context's cache
        elif recurrent[il]:
            kv.append({"state": state_per_sequence})
        else:
            k_width = (head_k_swa if swa[il] else head_k) * kv_heads[il]
            v_width = 0 if mla else (head_v_swa if swa[il] else head_v) * kv_heads[il]
            kv.append({"k": k_width, "v": v_width, "swa": swa[il]})

    layer_bytes, layer_largest = [0] * layers, [0] * layers
    other = {}
    for tensor in model["tensors"]:
        match = _LAYER.match(tensor["name"])
        layer = int(match.group(1)) if match else layers
        if layer < layers:
            if layer < trunk:  # MTP layers' tensors are not loaded
                layer_bytes[layer] += tensor["bytes"]
                layer_largest[layer] = max(layer_largest[layer], tensor["bytes"])
        else:
            other[tensor["name"]] = tensor["bytes"]
    tokens = metadata.get("tokenizer.ggml.tokens")
    vocab = tokens["array_length"] if isinstance(tokens, dict) else len(tokens or [])
    input_bytes = sum(size for name, size in other.items() if name.startswith("token_embd."))
    tied = "output.weight" not in other
    tied_copy = other.get("token_embd.weight", 0) if tied else 0
    output_sizes = [size for name, size in other.items() if not name.startswith("token_embd.")]
    return {
        "architecture": arch,
        "modelled": family is not None,
        "name": metadata.get("general.name", ""),
        "layers": layers,
        "nextn_layers": nextn,
        "embedding_length": embd,
        "heads": head_count,
        "kv_heads": max(kv_heads) if kv_heads else 0,
        # the fewest KV heads of an attention layer: tensor parallelism splits attention in whole KV heads
        "kv_heads_min": min((kv_heads[il] for il in range(trunk) if kv[il] and "k" in kv[il]), default=0),
        "feed_forward_length": number("feed_forward_length", 4 * embd),
        "expert_count": number("expert_count", 0),
        "context_length": number("context_length", 0),
        "sliding_window": window if any(swa) else 0,
        "vocab_size": vocab,
        "layer_bytes": layer_bytes,
        # the largest weight of each layer, and of the output layer: the master sends a worker one weight in one message,
        # a copy of its bytes, at a time
        "layer_largest_bytes": layer_largest,
        "kv": kv,
        # token_embd stays on the master; the output layer's tensors go with the last offloaded "layer"; with tied
        # embeddings, a copy of token_embd too (tied_copy_bytes)
        "input_bytes": input_bytes,
        "output_bytes": sum(output_sizes),
        "tied_output": tied,
        "tied_copy_bytes": tied_copy,
        "output_largest_bytes": max(output_sizes + [tied_copy]),
        "weights_bytes": sum(tensor["bytes"] for tensor in model["tensors"]),
        "loaded_bytes": sum(layer_bytes) + sum(other.values()),
        "tensor_count": len(model["tensors"]),
    }


def context_sizes(context, slots, unified=False):
    """(n_ctx, n_ctx_seq, streams) as llama_context sets them from -c and -np (llama-context.cpp)."""
    n_ctx = -(-context // PAD) * PAD
    if unified:
        return n_ctx, n_ctx, 1
    per_sequence = -(-(n_ctx // slots) // PAD) * PAD
    return per_sequence * slots, per_sequence, slots


def layer_cache_bytes(model_shape, layer, context, slots, ubatch=UBATCH, unified=False, flash_attn=True):
    """One layer's cache in bytes for llama-server's -c context (every slot's) and -np slots."""
    entry = model_shape["kv"][layer]
    if entry is None:
        return 0
    _n_ctx, per_sequence, streams = context_sizes(context, slots, unified)
    if "state" in entry:
        return entry["state"] * max(1, slots)
    cells = per_sequence
    if entry["swa"]:
        window = model_shape["sliding_window"] * (slots if unified else 1)
        cells = -(-min(per_sequence, window + ubatch) // PAD) * PAD
    v_width = entry["v"]
    if not flash_attn and v_width:  # a transposed V cache is as wide as the widest layer's
        v_width = max(item["v"] for item in model_shape["kv"] if item and "v" in item)
    return cells * streams * (entry["k"] + v_width) * KV_BYTES
