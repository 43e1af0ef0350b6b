"""The GGUF reader: every ggml type of the pinned llama.cpp, multi-part sets as llama.cpp loads them, and what it
refuses. Models are written here with the gguf package (tests/tools)."""

import ast
import os
import re
import shutil
from pathlib import Path

import gguf as gguf_py
import numpy as np
import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import gguf

from tests.tools import model_shapes, tiny_model
from tests.tools.llama_cpp import pinned_source_file


def test_type_table_is_the_pinned_ggml_enum():
    """ids and names: ggml/include/ggml.h's enum ggml_type of the pinned release, every one of them."""
    header = pinned_source_file("ggml/include/ggml.h")
    enum = header[header.index("enum ggml_type {"):]
    enum = enum[:enum.index("};")]
    declared = {int(number): name for name, number in re.findall(r"^\s*GGML_TYPE_(\w+)\s*=\s*(\d+),", enum, re.M)}
    declared.pop(max(declared))  # GGML_TYPE_COUNT
    assert {type_id: name for type_id, (name, _e, _b) in gguf.GGML_TYPES.items()} == declared
    assert len(gguf.GGML_TYPES) == 35


def test_type_table_is_the_pinned_gguf_py_table():
    """Block sizes: the pinned source's own gguf-py GGML_QUANT_SIZES (PyPI's gguf 0.19.0 is older: it lacks Q2_0 and
    sizes Q8_1 otherwise), evaluated from its text."""
    source = pinned_source_file("gguf-py/gguf/constants.py")
    qk_k = int(re.search(r"^QK_K = (\d+)", source, re.M).group(1))
    enum = source[source.index("class GGMLQuantizationType"):source.index("class ExpertGatingFuncType")]
    ids = {name: int(number) for name, number in re.findall(r"^    (\w+)\s*= (\d+)$", enum, re.M)}
    table = source[source.index("GGML_QUANT_SIZES"):]
    table = table[table.index("{"):table.index("\n}") + 2]
    sizes = {}
    for name, block, expression in re.findall(r"GGMLQuantizationType\.(\w+):\s*\((\d+),\s*([^)]+)\)", table):
        sizes[ids[name]] = (name, int(block), eval(compile(ast.parse(expression.replace("QK_K", str(qk_k)), mode="eval"),  # noqa: S307
                                                          "constants", "eval")))
    assert sizes == gguf.GGML_TYPES


def test_bytes_of_every_type_against_the_gguf_package(tmp_path):
    """What the gguf package writes for a tensor of each type it knows is what the reader sizes (data_bytes)."""
    writer = gguf_py.GGUFWriter(str(tmp_path / "types.gguf"), "llama")
    known = [qtype for qtype in gguf_py.GGMLQuantizationType if qtype.value in gguf.GGML_TYPES
             and gguf_py.GGML_QUANT_SIZES[qtype] == gguf.GGML_TYPES[qtype.value][1:]]
    for qtype in known:
        elements, block = gguf_py.GGML_QUANT_SIZES[qtype]
        data = np.zeros((3, 2 * 256 // elements * block if elements > 1 else 2 * 256 * block), dtype=np.uint8)
        writer.add_tensor(qtype.name.lower(), data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    header = gguf.read_header(tmp_path / "types.gguf")
    assert len(header["tensors"]) == len(known) >= 30
    for tensor in header["tensors"]:
        assert tensor["shape"] == [512, 3]
        _name, elements, block = gguf.GGML_TYPES[tensor["type"]]
        assert tensor["bytes"] == 3 * 512 // elements * block <= tensor["size"]


def _one_tensor_model(path, type_id, ne0=512, rows=64):
    """A model of one tensor of any type id (written raw: the gguf package refuses ids it does not know)."""
    writer = gguf_py.GGUFWriter(str(path), "llama")
    writer.add_tensor_info("blk.0.ffn_down.weight", (rows, ne0), np.dtype(np.float32), 0,
                           raw_dtype=gguf_py.GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    data = bytearray(Path(path).read_bytes())
    # the tensor info's type is the u32 before its u64 offset, at the end of the header
    end = data.rindex(b"blk.0.ffn_down.weight") + len("blk.0.ffn_down.weight") + 4 + 16
    data[end:end + 4] = type_id.to_bytes(4, "little")
    Path(path).write_bytes(bytes(data))
    elements, block = gguf.GGML_TYPES.get(type_id, ("", 1, 4))[1:]
    aligned = -(-len(data) // 32) * 32
    os.truncate(path, aligned + rows * ne0 // elements * block)
    return path


@pytest.mark.parametrize("type_name", ["IQ4_XS", "IQ4_NL", "MXFP4", "Q2_0", "IQ2_XXS", "TQ2_0", "NVFP4", "Q1_0"])
def test_a_file_cut_inside_a_tensor_of_any_type_is_refused(tmp_path, type_name):
    type_id = model_shapes.TYPE_IDS[type_name]
    model = _one_tensor_model(tmp_path / "m.gguf", type_id)
    assert gguf.read_header(model)["tensors"][0]["bytes"] == os.path.getsize(model) - gguf.read_header(model)["data_offset"]
    os.truncate(model, os.path.getsize(model) - 1024)
    with pytest.raises(gguf.GGUFError, match=r"shorter than its tensor table says \(blk\.0\.ffn_down\.weight, %s" % type_name):
        gguf.read_header(model)


def test_a_type_the_pinned_build_lacks_is_refused_by_name(tmp_path):
    model = _one_tensor_model(tmp_path / "m.gguf", 99)
    with pytest.raises(gguf.GGUFError, match=r"tensor blk\.0\.ffn_down\.weight has ggml type 99, which llama\.cpp b11312 "
                                             r"does not have .*llama_build_version"):
        gguf.read_header(model)


def test_rows_that_are_not_whole_blocks_are_refused(tmp_path):
    model = _one_tensor_model(tmp_path / "m.gguf", model_shapes.TYPE_IDS["Q4_K"], ne0=300)
    with pytest.raises(gguf.GGUFError, match="rows of 300 values, not whole blocks of 256"):
        gguf.read_header(model)


@pytest.mark.parametrize("content, message", [
    (b"", "not a GGUF file"),
    (b"PK\x03\x04 a zip file", "not a GGUF file"),
    (b"GGUF\x09\x00\x00\x00", "version 9"),
    (b"GGUF\x03\x00\x00\x00\x01\x00", "ends early"),
])
def test_not_a_model(tmp_path, content, message):
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    with pytest.raises(gguf.GGUFError, match=message):
        gguf.read_model(path)


@pytest.fixture(scope="module")
def three_parts(tmp_path_factory):
    """A small llama model written as a set of three parts, as llama.cpp's gguf-split names them."""
    directory = tmp_path_factory.mktemp("set")
    paths = model_shapes.small("llama", directory / "model.gguf", split_max_size=6 << 20)
    assert [path.name for path in paths] == ["model-0000%d-of-00003.gguf" % number for number in (1, 2, 3)]
    return paths


def test_a_set_is_read_from_its_first_part_with_every_tensor(three_parts):
    model = gguf.read_model(three_parts[0])
    assert [part["path"] for part in model["parts"]] == [str(path) for path in three_parts]
    assert model["file_size"] == sum(os.path.getsize(path) for path in three_parts)
    assert len(model["tensors"]) == model["metadata"]["split.tensors.count"] == 4 + 4 * 9  # embeddings, rope factors, norm, output; 4 layers
    assert {tensor["path"] for tensor in model["tensors"]} == {str(path) for path in three_parts}
    for tensor in model["tensors"][:3] + model["tensors"][-3:]:  # each tensor's file_offset is in its own part
        assert tensor["file_offset"] + tensor["bytes"] <= os.path.getsize(tensor["path"])
    assert gguf.set_base_name(str(three_parts[0])) == "model"


def test_a_set_read_ahead_from_its_parts_first_bytes_is_the_set_read_from_its_files(three_parts):
    """header_from_bytes on each part's first bytes (a download's, before the rest) gives read_header's dict, and
    read_model over them the model read from the files; bytes that end inside the header ask for more, while a whole
    file that ends there is cut short."""
    read_ahead = {}
    for path in three_parts:
        data, size = path.read_bytes(), os.path.getsize(path)
        offset = gguf.read_header(path)["data_offset"]
        with pytest.raises(gguf.HeaderIncomplete):
            gguf.header_from_bytes(data[:offset - 40], path.name, size)
        read_ahead[path.name] = gguf.header_from_bytes(data[:offset], path.name, size)
        with pytest.raises(gguf.GGUFError) as refused:
            gguf.header_from_bytes(data[:offset - 40], path.name, offset - 40)  # the whole file, cut in its header
        assert not isinstance(refused.value, gguf.HeaderIncomplete) and "ends early" in str(refused.value)
    ahead, files = gguf.read_model(three_parts[0].name, read_ahead=read_ahead), gguf.read_model(three_parts[0])
    assert [part["size"] for part in ahead["parts"]] == [part["size"] for part in files["parts"]]
    for tensor in files["tensors"]:
        tensor["path"] = os.path.basename(tensor["path"])
    assert ahead["tensors"] == files["tensors"] and ahead["metadata"] == files["metadata"]
    with pytest.raises(gguf.GGUFError, match="part 3 of 3 of model-00001-of-00003.gguf, model-00003-of-00003.gguf, is not "
                                             "beside it"):
        gguf.read_model(three_parts[0].name, read_ahead={name: read_ahead[name] for name in list(read_ahead)[:2]})


def test_a_single_file_is_a_set_of_one(tmp_path):
    model = tiny_model.write_model(tmp_path / "one.gguf")
    read = gguf.read_model(model)
    assert read["parts"] == [{"path": str(model), "size": os.path.getsize(model)}] and gguf.set_base_name(str(model)) == "one"


def _copy(paths, directory, rename=None):
    directory.mkdir()
    for path in paths:
        shutil.copy(path, directory / (rename(path.name) if rename else path.name))
    return directory


def test_a_path_to_part_two_names_the_first(three_parts):
    with pytest.raises(gguf.GGUFError, match=r"part 2 of 3 of a multi-part model; .* point at its first part, "
                                             r"model-00001-of-00003\.gguf"):
        gguf.read_model(three_parts[1])


def test_a_missing_part_is_named(three_parts, tmp_path):
    directory = _copy([three_parts[0], three_parts[2]], tmp_path / "two")
    with pytest.raises(gguf.GGUFError, match=r"part 2 of 3 of model-00001-of-00003\.gguf, model-00002-of-00003\.gguf, is "
                                             r"not beside it"):
        gguf.read_model(directory / three_parts[0].name)


def test_a_part_of_another_set_is_refused(three_parts, tmp_path):
    other = model_shapes.small("llama", tmp_path / "other.gguf", split_max_size=3 << 20)  # more, smaller parts
    directory = _copy(three_parts, tmp_path / "mixed")
    shutil.copy(other[1], directory / three_parts[1].name)
    with pytest.raises(gguf.GGUFError, match=r"is not part 2 of the set of model-00001-of-00003\.gguf: it says split\.no=1, "
                                             r"split\.count=\d+"):
        gguf.read_model(directory / three_parts[0].name)


def test_parts_whose_tensors_overlap_are_refused(three_parts, tmp_path):
    """Part 3 rewritten so that its first tensor has the name of one in part 2 (names of equal length: the header's
    offsets stay valid)."""
    directory = _copy(three_parts, tmp_path / "overlap")
    third = directory / three_parts[2].name
    renamed = gguf.read_header(third)["tensors"][0]["name"]
    taken = next(tensor["name"] for tensor in gguf.read_header(three_parts[1])["tensors"] if len(tensor["name"]) == len(renamed))
    third.write_bytes(third.read_bytes().replace(renamed.encode(), taken.encode(), 1))
    with pytest.raises(gguf.GGUFError, match=r"tensor %s is in part 2 and in part 3 of model-00001-of-00003\.gguf: the parts "
                                             r"overlap" % re.escape(taken)):
        gguf.read_model(directory / three_parts[0].name)


def test_a_renamed_first_part_is_refused(three_parts, tmp_path):
    directory = _copy(three_parts[:1], tmp_path / "renamed", rename=lambda name: "model.gguf")
    with pytest.raises(gguf.GGUFError, match=r"is the first of 3 parts, and its name does not end in -00001-of-00003\.gguf"):
        gguf.read_model(directory / "model.gguf")


def test_per_layer_metadata_arrays_are_kept(tmp_path):
    """Per-layer values (head counts, window patterns) up to llama.cpp's 512 layers are read whole."""
    writer = gguf_py.GGUFWriter(str(tmp_path / "arrays.gguf"), "gemma3")
    writer.add_array("gemma3.attention.sliding_window_pattern", [True, False] * 40)
    writer.add_array("gemma3.attention.head_count_kv", [8] * 80)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    metadata = gguf.read_header(tmp_path / "arrays.gguf")["metadata"]
    assert metadata["gemma3.attention.sliding_window_pattern"] == [True, False] * 40
    assert metadata["gemma3.attention.head_count_kv"] == [8] * 80
