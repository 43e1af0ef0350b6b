"""Write a random-weight LLaMA-architecture GGUF that llama.cpp loads and samples from.

No model hub is reachable from the test machines, so the tests make their own model. The weights
are random: the text it generates is noise (printable: see write_model), good only for proving the
plumbing (load, split across RPC workers, generate). Sizes are parameters, so the same code makes a
few-MB model for functional tests and a few-hundred-MB one for load-time measurements.

    python -m tests.tools.tiny_model OUT.gguf [--embd 64] [--layers 2] [--ff 128] [--heads 4] [--kv-heads 2]
                                              [--split-max-size BYTES]
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


def tensor_shapes(vocab, embd, layers, ff, kv_dim):
    """(name, numpy shape) of every tensor of a LLaMA-architecture model, in file order."""
    yield "token_embd.weight", (vocab, embd)
    for layer in range(layers):
        prefix = f"blk.{layer}."
        yield prefix + "attn_norm.weight", (embd,)
        yield prefix + "attn_q.weight", (embd, embd)
        yield prefix + "attn_k.weight", (kv_dim, embd)
        yield prefix + "attn_v.weight", (kv_dim, embd)
        yield prefix + "attn_output.weight", (embd, embd)
        yield prefix + "ffn_norm.weight", (embd,)
        yield prefix + "ffn_gate.weight", (ff, embd)
        yield prefix + "ffn_up.weight", (ff, embd)
        yield prefix + "ffn_down.weight", (embd, ff)
    yield "output_norm.weight", (embd,)
    yield "output.weight", (vocab, embd)


def _writer(path, embd, layers, ff, heads, kv_heads, context, split_max_size=0, vocab=0):
    """A GGUFWriter with the metadata and tokenizer set; returns (writer, vocab size, bos, eos, kv_dim). With
    split_max_size, a multi-part set as llama.cpp's gguf-split writes it (PATH's stem-00001-of-0000N.gguf ...)."""
    head_dim = embd // heads

    writer = gguf.GGUFWriter(str(path), "llama", split_max_size=split_max_size)
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
    vocab, bos, eos = add_tokenizer(writer, vocab)
    return writer, vocab, bos, eos, head_dim * kv_heads


def add_tokenizer(writer, vocab=0):
    """A byte-level gpt2 tokenizer: every byte, four merges, unique tokens filling it up to `vocab` tokens (none by
    default), then BOS and EOS. Returns (vocab size, bos, eos)."""
    tokens = byte_level_vocab()
    # A non-empty merges list is required (an empty one is not written and loading fails); each merge's
    # result is in the vocabulary.
    merges = ["Ġ t", "h e", "Ġ a", "i n"]
    tokens += [left + right for left, right in (merge.split(" ") for merge in merges)]
    tokens += ["<t%d>" % index for index in range(max(0, vocab - len(tokens) - 2))]
    types = [gguf.TokenType.NORMAL] * len(tokens)
    bos, eos = len(tokens), len(tokens) + 1
    tokens += ["<s>", "</s>"]
    types += [gguf.TokenType.CONTROL] * 2
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    # gpt2 defaults BOS and EOS both to 11: set them.
    writer.add_bos_token_id(bos)
    writer.add_eos_token_id(eos)
    writer.add_add_bos_token(False)
    return len(tokens), bos, eos


# Bumped whenever write_model's output changes: cached models (make demo's) are made again.
GENERATION = 2

# The bytes whose tokens the model may generate: printable ASCII and the newline. The others (control bytes, and
# the bytes >= 0x80 that alone are no UTF-8) printed as replacement characters, which looked like a broken cluster.
PRINTABLE_BYTES = [0x0A] + list(range(0x20, 0x7F))


def write_model(path, embd=64, layers=2, ff=128, heads=4, kv_heads=2, context=512, seed=42, split_max_size=0, vocab=0):
    """Random weights, with one steering feature: dimension 0 of every token's embedding is large, so after the last
    norm it is large and positive whatever the text; the output rows of the tokens it must not generate (bytes
    outside PRINTABLE_BYTES, BOS, EOS) weigh it negatively. Their logits sit far below the others', and any sampling
    (greedy or at a temperature) writes readable noise. With split_max_size, the same tensors as a multi-part set:
    returns its first part. vocab: that many tokens (add_tokenizer), another vocabulary than the default's."""
    rng = np.random.default_rng(seed)
    writer, vocab, bos, eos, kv_dim = _writer(path, embd, layers, ff, heads, kv_heads, context, split_max_size, vocab)
    unwanted = [token for token in range(256) if token not in PRINTABLE_BYTES] + [bos, eos]
    for name, shape in tensor_shapes(vocab, embd, layers, ff, kv_dim):
        if len(shape) == 1:
            data = np.ones(shape, dtype=np.float32)
        else:
            data = rng.normal(0.0, 0.02, size=shape).astype(np.float32)
        if name == "token_embd.weight":
            data[:, 0] = 1.0
        if name == "output.weight":
            data[:, 0] = 0.0
            data[unwanted, 0] = -1.0
        writer.add_tensor(name, data)
    parts = writer.format_shard_names(Path(path))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return parts[0]


def write_header_only(path, embd=8192, layers=80, ff=28672, heads=64, kv_heads=8, context=8192):
    """The header of a big F32 model (default: a 70B shape, about 280 GB) without its weights. Returns the
    size the complete file has: extend the header to it (truncate -s SIZE) for a sparse file that reads
    as the whole model but takes no disk space. For testing what happens to a model too big to fit."""
    writer, vocab, _bos, _eos, kv_dim = _writer(path, embd, layers, ff, heads, kv_heads, context)
    for name, shape in tensor_shapes(vocab, embd, layers, ff, kv_dim):
        nbytes = 4 * int(np.prod(shape))
        writer.add_tensor_info(name, shape, np.dtype(np.float32), nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    data_start = -(-Path(path).stat().st_size // 32) * 32
    # each tensor is padded to the 32-byte alignment
    padded = [-(-4 * int(np.prod(shape)) // 32) * 32 for _name, shape in tensor_shapes(vocab, embd, layers, ff, kv_dim)]
    total = data_start + sum(padded)
    return total


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
    parser.add_argument("--split-max-size", type=int, default=0, help="write a multi-part set of parts up to this size")
    args = parser.parse_args()
    path = write_model(args.output, args.embd, args.layers, args.ff, args.heads, args.kv_heads, args.context, args.seed,
                       args.split_max_size)
    print(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
