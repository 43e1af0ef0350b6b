"""GGUF models of the architectures people split across machines, written by the tests: real shapes without weights,
and small ones with random weights.

No model hub is reachable from the test machines, so the tests write the models. Each architecture's tensor set and
metadata are what llama.cpp b11312's loader asks for (src/models/<arch>.cpp, load_arch_hparams and load_arch_tensors);
the dimensions are a real model's (its published config.json) or small ones:

- header(...): the exact header of a real model (Llama-3.1-70B Q4_K_M, Qwen3-235B-A22B Q4_K_M, gpt-oss-120b MXFP4,
  Gemma-3-27B Q4_K_M, DeepSeek-V3 IQ2_XXS with its MTP layer, Qwen3-Next-80B-A3B Q4_K_M), its data a hole: the file
  has the model's full size and takes no disk. llama.cpp's projection (llama-fit-params) reads no tensor data, so it
  projects the real model from it. Several parts with split_max_size, as the hub publishes big models.
- small(...): the same architecture at small dimensions with random weights, which llama.cpp loads and samples from.

    python -m tests.tools.model_shapes MODEL OUT.gguf [--small] [--split-max-size BYTES]
"""

import argparse
import hashlib
import os
from pathlib import Path

import gguf
import numpy as np

from tests.tools import tiny_model

# ggml type ids and block sizes: the collection's table (checked against the pinned llama.cpp by the unit tests)
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.gguf import GGML_TYPES

TYPE_IDS = {name: type_id for type_id, (name, _elements, _bytes) in GGML_TYPES.items()}
ALIGNMENT = 32


def nbytes(ne, type_name):
    _name, elements, block = GGML_TYPES[TYPE_IDS[type_name]]
    count = int(np.prod(ne))
    return count // elements * block


# ---- each architecture's tensors: (name, ne (ggml order, ne0 first), role) ----
# role picks the tensor's type from a quantization mix: "embd", "output", "attn", "attn_v", "ffn", "ffn_down",
# "expert", "expert_down", "norm" (always F32), "small" (F32 vectors and router weights).

def _attention(il, h, q_width=None):
    q_width = q_width or h["head_k"] * h["heads"]
    kv = h["head_k"] * h["kv_heads"]
    return [(f"blk.{il}.attn_q.weight", (h["embd"], q_width), "attn"),
            (f"blk.{il}.attn_k.weight", (h["embd"], kv), "attn"),
            (f"blk.{il}.attn_v.weight", (h["embd"], h["head_v"] * h["kv_heads"]), "attn_v"),
            (f"blk.{il}.attn_output.weight", (h["head_v"] * h["heads"], h["embd"]), "attn")]


def _dense_ffn(il, h, ff=None):
    ff = ff or h["ff"]
    return [(f"blk.{il}.ffn_gate.weight", (h["embd"], ff), "ffn"), (f"blk.{il}.ffn_up.weight", (h["embd"], ff), "ffn"),
            (f"blk.{il}.ffn_down.weight", (ff, h["embd"]), "ffn_down")]


def _experts(il, h):
    return [(f"blk.{il}.ffn_gate_inp.weight", (h["embd"], h["experts"]), "small"),
            (f"blk.{il}.ffn_gate_exps.weight", (h["embd"], h["ff_exp"], h["experts"]), "expert"),
            (f"blk.{il}.ffn_up_exps.weight", (h["embd"], h["ff_exp"], h["experts"]), "expert"),
            (f"blk.{il}.ffn_down_exps.weight", (h["ff_exp"], h["embd"], h["experts"]), "expert_down")]


def _ends(h, tied=False):
    first = [("token_embd.weight", (h["embd"], h["vocab"]), "embd")]
    last = [("output_norm.weight", (h["embd"],), "norm")]
    if not tied:
        last.append(("output.weight", (h["embd"], h["vocab"]), "output"))
    return first, last


def llama_tensors(h):
    first, last = _ends(h)
    tensors = first + [("rope_freqs.weight", (h["head_k"] // 2,), "norm")]
    for il in range(h["layers"]):
        tensors += [(f"blk.{il}.attn_norm.weight", (h["embd"],), "norm")] + _attention(il, h)
        tensors += [(f"blk.{il}.ffn_norm.weight", (h["embd"],), "norm")] + _dense_ffn(il, h)
    return tensors + last


def qwen3moe_tensors(h):
    first, last = _ends(h)
    tensors = list(first)
    for il in range(h["layers"]):
        tensors += [(f"blk.{il}.attn_norm.weight", (h["embd"],), "norm")] + _attention(il, h)
        tensors += [(f"blk.{il}.attn_k_norm.weight", (h["head_k"],), "norm"),
                    (f"blk.{il}.attn_q_norm.weight", (h["head_k"],), "norm"),
                    (f"blk.{il}.ffn_norm.weight", (h["embd"],), "norm")] + _experts(il, h)
    return tensors + last


def gpt_oss_tensors(h):
    first, last = _ends(h)
    tensors = list(first)
    for il in range(h["layers"]):
        tensors += [(f"blk.{il}.attn_norm.weight", (h["embd"],), "norm"),
                    (f"blk.{il}.post_attention_norm.weight", (h["embd"],), "norm")] + _attention(il, h)
        tensors += [(f"blk.{il}.attn_q.bias", (h["head_k"] * h["heads"],), "norm"),
                    (f"blk.{il}.attn_k.bias", (h["head_k"] * h["kv_heads"],), "norm"),
                    (f"blk.{il}.attn_v.bias", (h["head_v"] * h["kv_heads"],), "norm"),
                    (f"blk.{il}.attn_output.bias", (h["embd"],), "norm"),
                    (f"blk.{il}.attn_sinks.weight", (h["heads"],), "norm")] + _experts(il, h)
        tensors += [(f"blk.{il}.ffn_gate_inp.bias", (h["experts"],), "norm"),
                    (f"blk.{il}.ffn_gate_exps.bias", (h["ff_exp"], h["experts"]), "norm"),
                    (f"blk.{il}.ffn_down_exps.bias", (h["embd"], h["experts"]), "norm"),
                    (f"blk.{il}.ffn_up_exps.bias", (h["ff_exp"], h["experts"]), "norm")]
    return tensors + last


def gemma3_tensors(h):
    first, last = _ends(h, tied=True)
    tensors = list(first)
    for il in range(h["layers"]):
        tensors += [(f"blk.{il}.attn_norm.weight", (h["embd"],), "norm")] + _attention(il, h)
        tensors += [(f"blk.{il}.post_attention_norm.weight", (h["embd"],), "norm"),
                    (f"blk.{il}.attn_k_norm.weight", (h["head_k"],), "norm"),
                    (f"blk.{il}.attn_q_norm.weight", (h["head_k"],), "norm"),
                    (f"blk.{il}.ffn_norm.weight", (h["embd"],), "norm")] + _dense_ffn(il, h)
        tensors += [(f"blk.{il}.post_ffw_norm.weight", (h["embd"],), "norm")]
    return tensors + last


def deepseek2_tensors(h):
    first, last = _ends(h)
    tensors = list(first)
    rope, nope = h["rope_dims"], h["head_k_mla"] - h["rope_dims"]
    for il in range(h["layers"] + h["nextn"]):
        tensors += [(f"blk.{il}.attn_norm.weight", (h["embd"],), "norm"),
                    (f"blk.{il}.attn_q_a_norm.weight", (h["q_lora"],), "norm"),
                    (f"blk.{il}.attn_kv_a_norm.weight", (h["kv_lora"],), "norm"),
                    (f"blk.{il}.attn_q_a.weight", (h["embd"], h["q_lora"]), "attn"),
                    (f"blk.{il}.attn_q_b.weight", (h["q_lora"], h["heads"] * h["head_k_mla"]), "attn"),
                    (f"blk.{il}.attn_kv_a_mqa.weight", (h["embd"], h["kv_lora"] + rope), "attn"),
                    (f"blk.{il}.attn_k_b.weight", (nope, h["kv_lora"], h["heads"]), "attn_b"),
                    (f"blk.{il}.attn_v_b.weight", (h["kv_lora"], h["head_v_mla"], h["heads"]), "attn_b"),
                    (f"blk.{il}.attn_output.weight", (h["heads"] * h["head_v_mla"], h["embd"]), "attn"),
                    (f"blk.{il}.ffn_norm.weight", (h["embd"],), "norm")]
        if il < h["dense_lead"]:
            tensors += _dense_ffn(il, h)
        else:
            shared = h["ff_exp"] * h["shared"]
            tensors += _experts(il, h) + [
                (f"blk.{il}.exp_probs_b.bias", (h["experts"],), "norm"),
                (f"blk.{il}.ffn_gate_shexp.weight", (h["embd"], shared), "ffn"),
                (f"blk.{il}.ffn_up_shexp.weight", (h["embd"], shared), "ffn"),
                (f"blk.{il}.ffn_down_shexp.weight", (shared, h["embd"]), "ffn_down")]
        if il >= h["layers"]:  # the multi-token-prediction layer
            tensors += [(f"blk.{il}.nextn.eh_proj.weight", (2 * h["embd"], h["embd"]), "attn"),
                        (f"blk.{il}.nextn.enorm.weight", (h["embd"],), "norm"),
                        (f"blk.{il}.nextn.hnorm.weight", (h["embd"],), "norm"),
                        (f"blk.{il}.nextn.shared_head_norm.weight", (h["embd"],), "norm")]
    return tensors + last


def qwen3next_tensors(h):
    first, last = _ends(h)
    tensors = list(first)
    key_dim, value_dim = h["ssm_state"] * h["ssm_groups"], h["ssm_state"] * h["ssm_dt_rank"]
    for il in range(h["layers"]):
        tensors += [(f"blk.{il}.attn_norm.weight", (h["embd"],), "norm"),
                    (f"blk.{il}.post_attention_norm.weight", (h["embd"],), "norm")]
        if (il + 1) % h["full_attention_interval"] == 0:
            tensors += _attention(il, h, q_width=h["head_k"] * h["heads"] * 2) + [
                (f"blk.{il}.attn_q_norm.weight", (h["head_k"],), "norm"),
                (f"blk.{il}.attn_k_norm.weight", (h["head_k"],), "norm")]
        else:
            tensors += [(f"blk.{il}.attn_qkv.weight", (h["embd"], key_dim * 2 + value_dim), "attn"),
                        (f"blk.{il}.attn_gate.weight", (h["embd"], value_dim), "attn"),
                        (f"blk.{il}.ssm_conv1d.weight", (h["ssm_conv"], key_dim * 2 + value_dim), "norm"),
                        (f"blk.{il}.ssm_dt.bias", (h["ssm_dt_rank"],), "norm"),
                        (f"blk.{il}.ssm_a", (h["ssm_dt_rank"],), "norm"),
                        (f"blk.{il}.ssm_ba.weight", (h["embd"], 2 * h["ssm_dt_rank"]), "small"),
                        (f"blk.{il}.ssm_norm.weight", (h["ssm_state"],), "norm"),
                        (f"blk.{il}.ssm_out.weight", (value_dim, h["embd"]), "attn")]
        tensors += _experts(il, h) + [
            (f"blk.{il}.ffn_gate_inp_shexp.weight", (h["embd"],), "norm"),
            (f"blk.{il}.ffn_gate_shexp.weight", (h["embd"], h["ff_shexp"]), "ffn"),
            (f"blk.{il}.ffn_up_shexp.weight", (h["embd"], h["ff_shexp"]), "ffn"),
            (f"blk.{il}.ffn_down_shexp.weight", (h["ff_shexp"], h["embd"]), "ffn_down")]
    return tensors + last


# ---- each architecture's metadata ----

def common_metadata(arch, h):
    values = {"context_length": h["context"], "embedding_length": h["embd"], "block_count": h["layers"] + h.get("nextn", 0),
              "feed_forward_length": h["ff"], "attention.head_count": h["heads"],
              "attention.head_count_kv": h["kv_heads"], "attention.layer_norm_rms_epsilon": 1e-6,
              "rope.freq_base": float(h.get("rope_base", 10000.0))}
    if "head_k" in h and h["head_k"] != h["embd"] // h["heads"]:
        values["attention.key_length"] = h["head_k"]
        values["attention.value_length"] = h["head_v"]
    if "experts" in h:
        values.update({"expert_count": h["experts"], "expert_used_count": h["experts_used"],
                       "expert_feed_forward_length": h["ff_exp"]})
    values.update(h.get("extra", {}))
    return values


ARCHITECTURES = {
    "llama": llama_tensors, "qwen3moe": qwen3moe_tensors, "gpt-oss": gpt_oss_tensors, "gemma3": gemma3_tensors,
    "deepseek2": deepseek2_tensors, "qwen3next": qwen3next_tensors,
}

# Quantization mixes: role -> type. Q4_K_M as llama-quantize makes it (token_embd Q4_K, output and attn_v/ffn_down of
# some layers Q6_K: simplified here to all of them).
Q4_K_M = {"embd": "Q4_K", "output": "Q6_K", "attn": "Q4_K", "attn_v": "Q6_K", "attn_b": "Q8_0", "ffn": "Q4_K",
          "ffn_down": "Q6_K", "expert": "Q4_K", "expert_down": "Q6_K", "norm": "F32", "small": "F32"}
MXFP4 = dict(Q4_K_M, embd="Q8_0", output="Q8_0", attn="Q8_0", attn_v="Q8_0", expert="MXFP4", expert_down="MXFP4")
IQ2_XXS = dict(Q4_K_M, expert="IQ2_XXS", expert_down="IQ2_XXS")

# Real models (their config.json), at the quantization the issue names.
REAL = {
    "llama-3.1-70b": ("llama", Q4_K_M, dict(embd=8192, layers=80, heads=64, kv_heads=8, head_k=128, head_v=128, ff=28672,
                                            vocab=128256, context=131072, rope_base=500000.0,
                                            extra={"rope.dimension_count": 128})),
    "qwen3-235b-a22b": ("qwen3moe", Q4_K_M, dict(embd=4096, layers=94, heads=64, kv_heads=4, head_k=128, head_v=128,
                                                 ff=12288, experts=128, experts_used=8, ff_exp=1536, vocab=151936,
                                                 context=40960, rope_base=1e6)),
    "gpt-oss-120b": ("gpt-oss", MXFP4, dict(embd=2880, layers=36, heads=64, kv_heads=8, head_k=64, head_v=64, ff=2880,
                                            experts=128, experts_used=4, ff_exp=2880, vocab=201088, context=131072,
                                            rope_base=150000.0, extra={"attention.sliding_window": 128,
                                                                       "rope.dimension_count": 64})),
    "gemma-3-27b": ("gemma3", Q4_K_M, dict(embd=5376, layers=62, heads=32, kv_heads=16, head_k=128, head_v=128,
                                           ff=21504, vocab=262208, context=131072, rope_base=1e6,
                                           extra={"attention.sliding_window": 1024, "rope.freq_base_swa": 10000.0})),
    "deepseek-v3": ("deepseek2", IQ2_XXS, dict(embd=7168, layers=61, nextn=1, heads=128, kv_heads=1, head_k=576,
                                               head_v=512, head_k_mla=192, head_v_mla=128, rope_dims=64, q_lora=1536,
                                               kv_lora=512, ff=18432, dense_lead=3, experts=256, experts_used=8,
                                               ff_exp=2048, shared=1, vocab=129280, context=163840, rope_base=10000.0,
                                               extra={"attention.key_length_mla": 192, "attention.value_length_mla": 128,
                                                      "rope.dimension_count": 64, "attention.q_lora_rank": 1536,
                                                      "attention.kv_lora_rank": 512, "leading_dense_block_count": 3,
                                                      "expert_shared_count": 1, "expert_weights_scale": 2.5,
                                                      "expert_weights_norm": True, "expert_gating_func": 2,
                                                      "expert_group_count": 8, "expert_group_used_count": 4,
                                                      "nextn_predict_layers": 1})),
    "qwen3-next-80b-a3b": ("qwen3next", Q4_K_M, dict(embd=2048, layers=48, heads=16, kv_heads=2, head_k=256, head_v=256,
                                                     ff=5120, experts=512, experts_used=10, ff_exp=512, ff_shexp=512,
                                                     vocab=151936, context=262144, rope_base=1e7, full_attention_interval=4,
                                                     ssm_conv=4, ssm_state=128, ssm_groups=16, ssm_dt_rank=32,
                                                     extra={"rope.dimension_count": 64, "ssm.conv_kernel": 4,
                                                            "ssm.state_size": 128, "ssm.group_count": 16,
                                                            "ssm.time_step_rank": 32, "ssm.inner_size": 4096,
                                                            "expert_shared_feed_forward_length": 512,
                                                            "full_attention_interval": 4})),
}

# The same architectures, small enough to load here (random F32 weights).
SMALL = {
    "llama": dict(embd=256, layers=4, heads=4, kv_heads=2, head_k=64, head_v=64, ff=1024, extra={"rope.dimension_count": 64}),
    "qwen3moe": dict(embd=256, layers=4, heads=4, kv_heads=2, head_k=64, head_v=64, ff=768, experts=8, experts_used=2,
                     ff_exp=256),
    "gpt-oss": dict(embd=256, layers=4, heads=4, kv_heads=2, head_k=64, head_v=64, ff=256, experts=8, experts_used=2,
                    ff_exp=256, extra={"attention.sliding_window": 32, "rope.dimension_count": 64}),
    "gemma3": dict(embd=256, layers=6, heads=4, kv_heads=2, head_k=64, head_v=64, ff=1024,
                   extra={"attention.sliding_window": 64, "rope.freq_base_swa": 10000.0}),
    "deepseek2": dict(embd=256, layers=4, nextn=1, heads=4, kv_heads=1, head_k=96, head_v=64, head_k_mla=64, head_v_mla=64,
                      rope_dims=32, q_lora=128, kv_lora=64, ff=768, dense_lead=1, experts=8, experts_used=2, ff_exp=256,
                      shared=1, extra={"attention.key_length_mla": 64, "attention.value_length_mla": 64,
                                       "rope.dimension_count": 32, "attention.q_lora_rank": 128,
                                       "attention.kv_lora_rank": 64, "leading_dense_block_count": 1,
                                       "expert_shared_count": 1, "expert_weights_scale": 1.0, "expert_weights_norm": True,
                                       "expert_gating_func": 2, "nextn_predict_layers": 1}),
    "qwen3next": dict(embd=256, layers=4, heads=4, kv_heads=2, head_k=64, head_v=64, ff=512, experts=8, experts_used=2,
                      ff_exp=128, ff_shexp=128, full_attention_interval=2, ssm_conv=4, ssm_state=32, ssm_groups=2,
                      ssm_dt_rank=4, extra={"rope.dimension_count": 16, "ssm.conv_kernel": 4, "ssm.state_size": 32,
                                            "ssm.group_count": 2, "ssm.time_step_rank": 4, "ssm.inner_size": 128,
                                            "expert_shared_feed_forward_length": 128, "full_attention_interval": 2}),
}
FAMILIES = {"llama": "llama-3.1-70b", "qwen3moe": "qwen3-235b-a22b", "gpt-oss": "gpt-oss-120b", "gemma3": "gemma-3-27b",
            "deepseek2": "deepseek-v3", "qwen3next": "qwen3-next-80b-a3b"}


def _tokenizer(writer, vocab):
    """A byte-level gpt2 vocabulary of `vocab` tokens (tiny_model's, filled up with unique tokens)."""
    return tiny_model.add_tokenizer(writer, vocab)[0]


def _metadata(writer, arch, h):
    for key, value in common_metadata(arch, h).items():
        full = f"{arch}.{key}"
        if isinstance(value, bool):
            writer.add_bool(full, value)
        elif isinstance(value, float):
            writer.add_float32(full, value)
        else:
            writer.add_uint32(full, value)


def _writer(path, arch, name, split_max_size):
    writer = gguf.GGUFWriter(str(path), arch, split_max_size=split_max_size or 0)
    writer.add_name(name)
    return writer


def header(model, path, split_max_size=None):
    """The header of a real model (REAL) with its data a hole. Returns the paths written (the parts, in order)."""
    arch, mix, h = REAL[model]
    writer = _writer(path, arch, model + " (header only, data sparse)", split_max_size)
    h = dict(h, vocab=h["vocab"])
    _metadata(writer, arch, h)
    _tokenizer(writer, h["vocab"])
    for name, ne, role in ARCHITECTURES[arch](h):
        type_name = mix[role]
        writer.add_tensor_info(name, tuple(reversed(ne)), np.dtype(np.float32), nbytes(ne, type_name),
                               raw_dtype=gguf.GGMLQuantizationType(TYPE_IDS[type_name]))
    paths = writer.format_shard_names(Path(path))
    shards = [[nbytes(ne, type_name) for ne, type_name in
               ((info.shape[::-1], gguf.GGMLQuantizationType(info.dtype).name) for info in shard.values())]
              for shard in writer.tensors]
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    for part, sizes in zip(paths, shards):
        data_start = -(-part.stat().st_size // ALIGNMENT) * ALIGNMENT
        os.truncate(part, data_start + sum(-(-size // ALIGNMENT) * ALIGNMENT for size in sizes))
    return paths


def small(arch, path, split_max_size=None, seed=42, vocab=300):
    """A small model of the architecture with random F32 weights (norms at 1). Returns the paths written."""
    h = dict(SMALL[arch], vocab=vocab, context=2048)
    rng = np.random.default_rng(seed)
    writer = _writer(path, arch, "small %s (random weights)" % arch, split_max_size)
    _metadata(writer, arch, h)
    h["vocab"] = _tokenizer(writer, vocab)
    for name, ne, role in ARCHITECTURES[arch](h):
        shape = tuple(reversed(ne))
        if role == "norm":
            data = np.ones(shape, dtype=np.float32)
            if name.endswith(".bias") or "ssm_a" in name or "exp_probs_b" in name or "sinks" in name:
                data = np.zeros(shape, dtype=np.float32)
        else:
            data = rng.normal(0.0, 0.02, size=shape).astype(np.float32)
        writer.add_tensor(name, data)
    paths = writer.format_shard_names(Path(path))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return paths


def write_sha256sums(paths, target):
    """A publisher's checksum file for the parts (sha256sum's format: hash, two spaces, file name); returns target."""
    target.write_text("".join("%s  %s\n" % (hashlib.sha256(path.read_bytes()).hexdigest(), path.name) for path in paths))
    return target


# Where each quantized block keeps its scales (ggml-common.h's block layouts): zeroed, a block dequantizes to zeros
# whatever its other bytes, so random bytes make distinct tensors (distinct hashes) that compute without NaNs.
SCALE_BYTES = {"MXFP4": [(0, 1)], "IQ4_XS": [(0, 2)], "IQ2_XXS": [(0, 2)], "Q2_K": [(80, 84)], "TQ2_0": [(64, 66)],
               "Q8_0": [(0, 2)], "Q4_K": [(0, 4)], "Q6_K": [(208, 210)], "Q4_0": [(0, 2)]}
# The types the typed model's feed-forward tensors take, one per tensor, in order (layer 0 gate, up, down, layer 1 ...).
TYPED = ["MXFP4", "IQ4_XS", "IQ2_XXS", "Q2_K", "TQ2_0", "BF16", "Q8_0"]


def _random_blocks(rng, ne, type_name):
    """Random bytes of a quantized tensor with every block's scales zeroed (numpy shape: rows x bytes per row)."""
    _name, elements, block = GGML_TYPES[TYPE_IDS[type_name]]
    rows = int(np.prod(ne[1:]))
    data = rng.integers(0, 256, size=(rows, ne[0] // elements, block), dtype=np.uint8)
    for start, end in SCALE_BYTES[type_name]:
        data[:, :, start:end] = 0
    return data.reshape(tuple(reversed(ne[1:])) + (ne[0] // elements * block,))


def typed(path, seed=42, ff=163840, vocab=12000):
    """A small llama whose feed-forward tensors are each of a type of TYPED (MXFP4, IQ4_XS, IQ2_XXS, Q2_K, TQ2_0, BF16,
    Q8_0), every one over llama.cpp's 10 MiB hash threshold (ff=163840: 42M values, 10.8 MB at IQ2_XXS's 2.06 bits);
    the rest F32. Their quantized blocks are random with zero scales (they compute zeros): the model loads and
    generates, and every tensor has its own bytes. It has no output.weight: its output is a copy of its embeddings
    (tied, as Gemma 3 and Llama 3.2 are), 12 MB, which llama.cpp sends by hash to the output layer's worker. Returns
    the path."""
    h = dict(SMALL["llama"], layers=3, ff=ff, vocab=vocab, context=2048)
    rng = np.random.default_rng(seed)
    writer = _writer(path, "llama", "typed llama (random blocks: %s)" % ", ".join(TYPED), None)
    _metadata(writer, "llama", h)
    h["vocab"] = _tokenizer(writer, vocab)
    kinds = iter(TYPED + ["IQ2_XXS", "IQ2_XXS"])  # 3 layers hold 9; the 2 left over of the smallest type (10.8 MB each)
    for name, ne, role in ARCHITECTURES["llama"](h):
        if name == "output.weight":
            continue  # tied to the embeddings
        if role in ("ffn", "ffn_down"):
            type_name = next(kinds)
            if type_name == "BF16":
                data = rng.normal(0.0, 0.02, size=tuple(reversed(ne))).astype(np.float32)
                bits = (data.view(np.uint32) >> 16).astype(np.uint16)
                writer.add_tensor(name, bits.view(np.uint8).reshape(tuple(reversed(ne[1:])) + (ne[0] * 2,)),
                                  raw_dtype=gguf.GGMLQuantizationType.BF16)
            else:
                writer.add_tensor(name, _random_blocks(rng, ne, type_name),
                                  raw_dtype=gguf.GGMLQuantizationType(TYPE_IDS[type_name]))
        elif role == "norm":
            writer.add_tensor(name, np.ones(tuple(reversed(ne)), dtype=np.float32))
        else:
            writer.add_tensor(name, rng.normal(0.0, 0.02, size=tuple(reversed(ne))).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)


def with_type(path, source, tensor, type_id):
    """A copy of a one-file model whose tensor of that name says it has ggml type type_id (any number: a type llama.cpp
    lacks, for example), its data left as it is. Returns the path."""
    data = bytearray(Path(source).read_bytes())
    name = tensor.encode()
    at = data.index(len(name).to_bytes(8, "little") + name) + 8 + len(name)
    dims = int.from_bytes(data[at:at + 4], "little")
    at += 4 + 8 * dims
    data[at:at + 4] = type_id.to_bytes(4, "little")
    Path(path).write_bytes(bytes(data))
    return Path(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a real model (%s) or, with --small, an architecture (%s)" % (
        ", ".join(REAL), ", ".join(SMALL)))
    parser.add_argument("output", type=Path)
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--typed", action="store_true", help="the small llama of every quantized type (TYPED)")
    parser.add_argument("--split-max-size", type=int, default=None)
    args = parser.parse_args()
    if args.typed:
        paths = [typed(args.output)]
    else:
        paths = (small if args.small else header)(args.model, args.output, args.split_max_size)
    for path in paths:
        print(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
