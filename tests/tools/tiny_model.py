"""Write a random-weight LLaMA-architecture GGUF that llama.cpp loads and samples from.

No model hub is reachable from the test machines, so the tests make their own model. The weights
are random: the text it generates is noise, good only for proving the plumbing (load, split across
RPC workers, generate). Sizes are parameters, so the same code makes a few-MB model for functional
tests and a few-hundred-MB one for load-time measurements.

    python -m tests.tools.tiny_model OUT.gguf [--embd 64] [--layers 2] [--ff 128] [--heads 4] [--kv-heads 2]
"""

import argparse
from pathlib import Path

import gguf
import numpy as np


def byte_level_vocab():
    """GPT-2's byte-to-unicode map: every byte is one printable token, so any text tokenizes."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    codes = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    table = dict(zip(printable, codes))
    return [chr(table[byte]) for byte in range(256)]


def write_model(path, embd=64, layers=2, ff=128, heads=4, kv_heads=2, context=512, seed=42):
    rng = np.random.default_rng(seed)
    tokens = byte_level_vocab()
    # A non-empty merges list is required (an empty one is not written and loading fails); each merge's
    # result is in the vocabulary.
    merges = ["Ġ t", "h e", "Ġ a", "i n"]
    tokens += [left + right for left, right in (merge.split(" ") for merge in merges)]
    types = [gguf.TokenType.NORMAL] * len(tokens)
    bos, eos = len(tokens), len(tokens) + 1
    tokens += ["<s>", "</s>"]
    types += [gguf.TokenType.CONTROL] * 2
    vocab = len(tokens)
    head_dim = embd // heads
    kv_dim = head_dim * kv_heads

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("graviton-llama-rpc-test-model (random weights)")
    writer.add_context_length(context)
    writer.add_embedding_length(embd)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    # gpt2 defaults BOS and EOS both to 11: set them.
    writer.add_bos_token_id(bos)
    writer.add_eos_token_id(eos)
    writer.add_add_bos_token(False)

    def weight(*shape):
        return rng.normal(0.0, 0.02, size=shape).astype(np.float32)

    def ones(size):
        return np.ones(size, dtype=np.float32)

    output = weight(vocab, embd)
    output[[bos, eos]] = 0.0  # so generation does not stop at once on a control token
    writer.add_tensor("token_embd.weight", weight(vocab, embd))
    for layer in range(layers):
        prefix = f"blk.{layer}."
        writer.add_tensor(prefix + "attn_norm.weight", ones(embd))
        writer.add_tensor(prefix + "attn_q.weight", weight(embd, embd))
        writer.add_tensor(prefix + "attn_k.weight", weight(kv_dim, embd))
        writer.add_tensor(prefix + "attn_v.weight", weight(kv_dim, embd))
        writer.add_tensor(prefix + "attn_output.weight", weight(embd, embd))
        writer.add_tensor(prefix + "ffn_norm.weight", ones(embd))
        writer.add_tensor(prefix + "ffn_gate.weight", weight(ff, embd))
        writer.add_tensor(prefix + "ffn_up.weight", weight(ff, embd))
        writer.add_tensor(prefix + "ffn_down.weight", weight(embd, ff))
    writer.add_tensor("output_norm.weight", ones(embd))
    writer.add_tensor("output.weight", output)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--embd", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--ff", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    path = write_model(args.output, args.embd, args.layers, args.ff, args.heads, args.kv_heads, args.context, args.seed)
    print(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
