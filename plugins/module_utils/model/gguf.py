# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read a GGUF model, one file or a multi-part set: its metadata and its tensor table, never its weights.

GGUF (versions 2 and 3, little-endian): magic "GGUF" | u32 version | u64 tensor count | u64 metadata
count | metadata (key, u32 type, value)... | tensor infos (name, u32 dims, u64 shape..., u32 ggml type,
u64 offset)... | padding to general.alignment | tensor data.

A model over the Hugging Face hub's 50 GB file limit is published as a set: <prefix>-00001-of-00009.gguf and so
on (llama.cpp's llama_split_path, "%s-%05d-of-%05d.gguf"). Each part is a GGUF file of its own with split.no
(0-based), split.count and split.tensors.count (the tensors of every part); the first part holds the model's
metadata. llama.cpp loads a set from its first part and finds the others beside it by name
(src/llama-model-loader.cpp): read_model does the same, and refuses what llama.cpp would refuse, with the fix.
"""

from __future__ import annotations

import io
import os
import re
import struct

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# Metadata value types -> struct format (scalars); 8 = string, 9 = array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING = 8
_ARRAY = 9
# Arrays longer than these are summarised by their length (tokenizer vocabularies run to 250k entries); per-layer
# values (head counts, sliding-window patterns) are kept whole up to llama.cpp's LLAMA_MAX_LAYERS.
_ARRAY_KEEP = 64
_NUMBER_ARRAY_KEEP = 512

# Every tensor type of llama.cpp b11312: id -> (name, elements per block, bytes per block). The ids and names are
# ggml/include/ggml.h's enum ggml_type, the block sizes its ggml/src/ggml.c type_traits (blck_size, type_size), as
# the pinned source's gguf-py lists them (GGML_QUANT_SIZES); tests/unit/plugins/module_utils/model/test_gguf.py checks this
# table against both. A tensor's bytes (ggml_nbytes, what llama.cpp hashes and sends) follow from its type and shape.
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18), 42: ("Q2_0", 64, 18),
}

# llama_split_path's names: <prefix>-<part, from 1>-of-<count>.gguf, five digits each.
SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<number>\d{5})-of-(?P<count>\d{5})\.gguf$")
SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")


class GGUFError(ValueError):
    """The file is not a GGUF model this reader understands, or not a whole one. not_gguf: it is no GGUF file at all
    (another format), where the others are GGUF files that are damaged or do not belong together."""

    def __init__(self, message, not_gguf=False):
        super().__init__(message)
        self.not_gguf = not_gguf


class HeaderIncomplete(GGUFError):
    """The first bytes of a file, read ahead of the rest (header_from_bytes), end inside its header: more are needed."""


class _Reader:
    def __init__(self, handle, path, whole_file=True):
        self.handle = handle
        self.path = path
        self.whole_file = whole_file  # False: the handle holds the file's first bytes only

    def read(self, size):
        data = self.handle.read(size)
        if len(data) != size:
            if not self.whole_file:
                raise HeaderIncomplete("%s: its header runs past the bytes read ahead" % self.path)
            raise GGUFError("%s: the GGUF header ends early (truncated file?)" % self.path)
        return data

    def unpack(self, fmt):
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self):
        length = self.unpack("<Q")
        if length > 1 << 24:
            raise GGUFError("%s: a %d-byte string in the header: not a GGUF file, or a corrupt one" % (self.path, length))
        return self.read(length).decode("utf-8", errors="replace")

    def value(self, kind, whole=False):
        """One value; an array longer than the reader keeps is only counted ({"array_length"}), unless whole."""
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            element_kind = self.unpack("<I")
            count = self.unpack("<Q")
            if element_kind in _SCALARS:
                size = struct.calcsize(_SCALARS[element_kind])
                if count > _NUMBER_ARRAY_KEEP and not whole:  # skipped over in one seek
                    self.handle.seek(count * size, os.SEEK_CUR)
                    return {"array_length": count}
                data = self.read(count * size)
                return list(struct.unpack("<%d%s" % (count, _SCALARS[element_kind][1]), data))
            values = [self.value(element_kind) for _index in range(count)]
            return values if count <= _ARRAY_KEEP or whole else {"array_length": count}
        raise GGUFError("%s: unknown metadata type %d in the header" % (self.path, kind))


def type_name(type_id):
    return GGML_TYPES[type_id][0] if type_id in GGML_TYPES else "type %d" % type_id


def data_bytes(tensor):
    """A tensor's data bytes, ggml_nbytes: what llama.cpp allocates, hashes and sends. (read_header's "size" runs to
    the next tensor, alignment padding included.) The type must be one of GGML_TYPES (read_header refuses others)."""
    _name, elements_per_block, block_bytes = GGML_TYPES[tensor["type"]]
    count = 1
    for dim in tensor["shape"]:
        count *= dim
    return count // elements_per_block * block_bytes


def _check_tensor(path, tensor):
    """What llama.cpp's gguf reader refuses: a type it does not have, a row that is not whole blocks."""
    if tensor["type"] not in GGML_TYPES:
        raise GGUFError(
            "%s: tensor %s has ggml type %d, which llama.cpp %s does not have (it knows %s): the file was written for "
            "another llama.cpp release, or is damaged. Use a model quantized with a type of this release, or set "
            "llama_build_version to a release that has that type." % (
                path, tensor["name"], tensor["type"], "b11312", ", ".join(name for name, _e, _b in GGML_TYPES.values())))
    elements_per_block = GGML_TYPES[tensor["type"]][1]
    if tensor["shape"] and tensor["shape"][0] % elements_per_block:
        raise GGUFError("%s: tensor %s (%s) has rows of %d values, not whole blocks of %d: a damaged file"
                        % (path, tensor["name"], type_name(tensor["type"]), tensor["shape"][0], elements_per_block))


def read_header(path, whole_arrays=()):
    """One GGUF file (the metadata arrays named in whole_arrays kept whole: a vocabulary's tokens). Returns {"version",
    "metadata", "tensors": [{name, shape, type, offset, size, bytes, path, file_offset}], "data_offset", "file_size"}:
    offset is relative to the data section, file_offset to the file's start, bytes is data_bytes, size runs to the next
    tensor (padding included)."""
    path = os.fspath(path)
    with open(path, "rb") as handle:
        return _parse_header(_Reader(handle, path), os.path.getsize(path), whole_arrays)


def header_from_bytes(data, path, file_size, whole_arrays=()):
    """read_header's dict from a file's first bytes (data, read ahead of the rest: a download's), the file being
    file_size bytes in all and to be named path. HeaderIncomplete when its header runs past data."""
    return _parse_header(_Reader(io.BytesIO(data), os.fspath(path), whole_file=len(data) >= file_size), file_size,
                         whole_arrays)


def _parse_header(reader, file_size, whole_arrays):
    path, handle = reader.path, reader.handle
    if handle.read(4) != MAGIC:
        raise GGUFError("%s is not a GGUF file (it does not start with 'GGUF')" % path, not_gguf=True)
    version = reader.unpack("<I")
    if version not in (2, 3):
        raise GGUFError("%s is GGUF version %d; this reader knows versions 2 and 3" % (path, version))
    tensor_count = reader.unpack("<Q")
    metadata_count = reader.unpack("<Q")
    metadata = {}
    for _index in range(metadata_count):
        key = reader.string()
        metadata[key] = reader.value(reader.unpack("<I"), whole=key in whole_arrays)
    tensors = []
    for _index in range(tensor_count):
        name = reader.string()
        dims = reader.unpack("<I")
        shape = [reader.unpack("<Q") for _dim in range(dims)]
        tensors.append({"name": name, "shape": shape, "type": reader.unpack("<I"), "offset": reader.unpack("<Q")})
    alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT))
    data_offset = -(-handle.tell() // alignment) * alignment
    for tensor in tensors:
        _check_tensor(path, tensor)
    ends = sorted(tensor["offset"] for tensor in tensors) + [file_size - data_offset]
    next_offset = dict(zip(ends, ends[1:]))
    for tensor in tensors:
        tensor["size"] = next_offset[tensor["offset"]] - tensor["offset"]
        tensor["bytes"] = data_bytes(tensor)
        tensor["path"] = path
        tensor["file_offset"] = data_offset + tensor["offset"]
        if tensor["size"] < tensor["bytes"]:
            raise GGUFError("%s is shorter than its tensor table says (%s, %s, is cut off): an incomplete download?"
                            % (path, tensor["name"], type_name(tensor["type"])))
    return {"version": version, "metadata": metadata, "tensors": tensors, "data_offset": data_offset, "file_size": file_size}


def split_name(path):
    """(prefix, part number from 1, part count) when the file name follows llama.cpp's pattern, else None."""
    match = SPLIT_NAME.match(os.path.basename(path))
    if not match:
        return None
    return os.path.join(os.path.dirname(path), match.group("prefix")), int(match.group("number")), int(match.group("count"))


def part_path(prefix, number, count):
    """llama_split_path: the name of part `number` (from 1) of a set of `count`."""
    return "%s-%05d-of-%05d.gguf" % (prefix, number, count)


def set_base_name(path):
    """The name a model is known by: the file name without .gguf, and for a set without the -0000k-of-0000n part."""
    split = split_name(path)
    base = os.path.basename(split[0]) if split else os.path.basename(path)
    return base[:-len(".gguf")] if base.endswith(".gguf") else base


def _split_fields(header):
    return [header["metadata"].get(key) for key in SPLIT_KEYS]


def read_model(path, whole_arrays=(), read_ahead=None):
    """A model from the file llama.cpp loads: a single file, or the first part of a set, whose other parts must lie
    beside it under llama.cpp's names. Returns read_header's dict for the whole model: the first part's metadata,
    every part's tensors (each with its part's path and file_offset), "parts": [{"path", "size"}] and "file_size" the
    parts' total. Refuses, naming the fix: another part than the first, a missing part, a part of another set, a
    tensor in two parts, a set whose tensor count is not split.tensors.count. read_ahead: {path: read_header's dict}
    for every part, read before the files are whole (a download's first bytes), in place of the files."""
    path = os.fspath(path)

    def header_of(part):
        return read_ahead[part] if read_ahead is not None else read_header(part, whole_arrays if part == path else ())

    first = header_of(path)
    number, count, tensor_count = _split_fields(first)
    count = int(count or 1)
    split = split_name(path)
    if number not in (None, 0):
        fix = ("its first part, %s" % os.path.basename(part_path(split[0], 1, split[2]))) if split else "its first part"
        raise GGUFError("%s is part %d of %d of a multi-part model; llama.cpp loads a set from its first part: point at "
                        "%s" % (path, int(number) + 1, count, fix))
    if count == 1:
        first["parts"] = [{"path": path, "size": first["file_size"]}]
        return first
    if not split or split[2] != count:
        raise GGUFError("%s is the first of %d parts, and its name does not end in -00001-of-%05d.gguf: llama.cpp finds "
                        "the other parts by that name. Keep the published file names (or rename every part the same "
                        "way: NAME-00001-of-%05d.gguf ...)" % (path, count, count, count))
    prefix = split[0]
    parts = [first]
    for number in range(2, count + 1):
        other = part_path(prefix, number, count)
        if not (other in read_ahead if read_ahead is not None else os.path.exists(other)):
            raise GGUFError("part %d of %d of %s, %s, is not beside it: every part of a set must be in one directory "
                            "under llama.cpp's names (fetch the missing part)" % (number, count, os.path.basename(path),
                                                                                  os.path.basename(other)))
        header = header_of(other)
        fields = _split_fields(header)
        if fields != [number - 1, count, tensor_count]:
            raise GGUFError(
                "%s is not part %d of the set of %s: it says split.no=%s, split.count=%s, split.tensors.count=%s where "
                "the set needs %d, %d, %s (a part of another model, or of another upload of it). Fetch every part of "
                "one set" % (other, number, os.path.basename(path), fields[0], fields[1], fields[2], number - 1, count,
                             tensor_count))
        parts.append(header)
    seen = {}
    for header, part in zip(parts, range(1, count + 1)):
        for tensor in header["tensors"]:
            if tensor["name"] in seen:
                raise GGUFError("tensor %s is in part %d and in part %d of %s: the parts overlap (llama.cpp refuses a "
                                "duplicated tensor). Fetch every part of one set"
                                % (tensor["name"], seen[tensor["name"]], part, os.path.basename(path)))
            seen[tensor["name"]] = part
    if tensor_count is not None and len(seen) != int(tensor_count):
        raise GGUFError("the %d parts of %s hold %d tensors and the set says %d (split.tensors.count): a damaged set"
                        % (count, os.path.basename(path), len(seen), int(tensor_count)))
    model = dict(first)
    model["tensors"] = [tensor for header in parts for tensor in header["tensors"]]
    model["parts"] = [{"path": header_path, "size": header["file_size"]}
                      for header, header_path in zip(parts, [path] + [part_path(prefix, n, count) for n in range(2, count + 1)])]
    model["file_size"] = sum(part["size"] for part in model["parts"])
    return model
