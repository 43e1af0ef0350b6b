# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read the header of a GGUF model file: its metadata and its tensor table, never its weights.

GGUF (versions 2 and 3, little-endian): magic "GGUF" | u32 version | u64 tensor count | u64 metadata
count | metadata (key, u32 type, value)... | tensor infos (name, u32 dims, u64 shape..., u32 ggml type,
u64 offset)... | padding to general.alignment | tensor data. A tensor's size on disk is the distance to
the next tensor's offset (the last one: to the end of the file), so no table of quantisation block sizes
is needed and every type, present or future, is sized exactly.
"""

from __future__ import annotations

import os
import struct

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# Metadata value types -> struct format (scalars); 8 = string, 9 = array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING = 8
_ARRAY = 9
# (elements per block, bytes per block) of the common ggml types: a tensor's data bytes (data_bytes), to spot a
# truncated file and to know what llama.cpp hashes. F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, BF16.
_BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 10: (256, 84),
           11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 30: (1, 2)}
# Arrays longer than this are summarised by their length (tokenizer vocabularies run to 250k entries).
_ARRAY_KEEP = 64


class GGUFError(ValueError):
    """The file is not a GGUF model this reader understands."""


class _Reader:
    def __init__(self, handle, path):
        self.handle = handle
        self.path = path

    def unpack(self, fmt):
        size = struct.calcsize(fmt)
        data = self.handle.read(size)
        if len(data) != size:
            raise GGUFError("%s: the GGUF header ends early (truncated file?)" % self.path)
        return struct.unpack(fmt, data)[0]

    def string(self):
        length = self.unpack("<Q")
        if length > 1 << 24:
            raise GGUFError("%s: a %d-byte string in the header: not a GGUF file, or a corrupt one" % (self.path, length))
        return self.handle.read(length).decode("utf-8", errors="replace")

    def value(self, kind):
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            element_kind = self.unpack("<I")
            count = self.unpack("<Q")
            if element_kind in _SCALARS and count > _ARRAY_KEEP:
                # Skip over fixed-size elements in one seek.
                self.handle.seek(count * struct.calcsize(_SCALARS[element_kind]), os.SEEK_CUR)
                return {"array_length": count}
            values = [self.value(element_kind) for _index in range(count)]
            return values if count <= _ARRAY_KEEP else {"array_length": count}
        raise GGUFError("%s: unknown metadata type %d in the header" % (self.path, kind))


def data_bytes(tensor):
    """A tensor's data bytes (ggml_nbytes: what llama.cpp hashes and sends), from its type and shape; None for a type
    without a known block size. (read_header's "size" runs to the next tensor, alignment padding included.)"""
    if tensor["type"] not in _BLOCKS:
        return None
    elements_per_block, block_bytes = _BLOCKS[tensor["type"]]
    count = 1
    for dim in tensor["shape"]:
        count *= dim
    return -(-count // elements_per_block) * block_bytes


def read_header(path):
    """Return {"version", "metadata", "tensors": [{name, shape, type, offset, size}], "data_offset", "file_size"}."""
    file_size = os.path.getsize(path)
    with open(path, "rb") as handle:
        reader = _Reader(handle, path)
        if handle.read(4) != MAGIC:
            raise GGUFError("%s is not a GGUF file (it does not start with 'GGUF')" % path)
        version = reader.unpack("<I")
        if version not in (2, 3):
            raise GGUFError("%s is GGUF version %d; this reader knows versions 2 and 3" % (path, version))
        tensor_count = reader.unpack("<Q")
        metadata_count = reader.unpack("<Q")
        metadata = {}
        for _index in range(metadata_count):
            key = reader.string()
            metadata[key] = reader.value(reader.unpack("<I"))
        tensors = []
        for _index in range(tensor_count):
            name = reader.string()
            dims = reader.unpack("<I")
            shape = [reader.unpack("<Q") for _dim in range(dims)]
            tensors.append({"name": name, "shape": shape, "type": reader.unpack("<I"), "offset": reader.unpack("<Q")})
        alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        data_offset = -(-handle.tell() // alignment) * alignment
    ends = sorted(tensor["offset"] for tensor in tensors) + [file_size - data_offset]
    next_offset = dict(zip(ends, ends[1:]))
    for tensor in tensors:
        tensor["size"] = next_offset[tensor["offset"]] - tensor["offset"]
    for tensor in tensors:
        needed = data_bytes(tensor)
        if needed is not None and tensor["size"] < needed:
            raise GGUFError("%s is shorter than its tensor table says (%s is cut off): an incomplete download?"
                            % (path, tensor["name"]))
    return {"version": version, "metadata": metadata, "tensors": tensors, "data_offset": data_offset, "file_size": file_size}


def model_shape(header):
    """The figures a memory plan needs, from the metadata of a decoder-only transformer."""
    metadata = header["metadata"]
    arch = metadata.get("general.architecture")
    if not arch:
        raise GGUFError("the model has no general.architecture: not a llama.cpp model file")

    def number(key, default=None):
        value = metadata.get("%s.%s" % (arch, key), default)
        if isinstance(value, list):  # per-layer values (e.g. head_count_kv on some architectures): the largest
            value = max(value)
        if value is None:
            raise GGUFError("the model's metadata lacks %s.%s" % (arch, key))
        return int(value)

    layers = number("block_count")
    embd = number("embedding_length")
    heads = number("attention.head_count")
    kv_heads = number("attention.head_count_kv", heads) or heads
    key_length = number("attention.key_length", embd // heads)
    value_length = number("attention.value_length", embd // heads)
    feed_forward = number("feed_forward_length", 4 * embd)
    layer_bytes = [0] * layers
    other = {}
    for tensor in header["tensors"]:
        parts = tensor["name"].split(".")
        if parts[0] == "blk" and len(parts) > 1 and parts[1].isdigit() and int(parts[1]) < layers:
            layer_bytes[int(parts[1])] += tensor["size"]
        else:
            other[tensor["name"]] = tensor["size"]
    tokens = metadata.get("tokenizer.ggml.tokens")
    vocab = tokens["array_length"] if isinstance(tokens, dict) else len(tokens or [])
    return {
        "architecture": arch,
        "name": metadata.get("general.name", ""),
        "layers": layers,
        "embedding_length": embd,
        "heads": heads,
        "kv_heads": kv_heads,
        "kv_width": kv_heads * (key_length + value_length),
        "feed_forward_length": feed_forward,
        "context_length": number("context_length", 0),
        "vocab_size": vocab,
        "layer_bytes": layer_bytes,
        # Token embeddings stay on the master (llama.cpp keeps the input layer on the CPU); the output
        # head and norm go with the last offloaded layer.
        "input_bytes": sum(size for name, size in other.items() if name.startswith("token_embd")),
        "output_bytes": sum(size for name, size in other.items() if not name.startswith("token_embd")),
        "weights_bytes": sum(tensor["size"] for tensor in header["tensors"]),
        "tensor_count": len(header["tensors"]),
    }
