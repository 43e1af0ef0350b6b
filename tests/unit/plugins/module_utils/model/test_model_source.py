"""rpc_master_model_src and its checksums: the parts of a model, each one's name on the master, and every input rule (the role's
pre-flight refuses with these messages before anything on a host changes)."""

import pytest
from ansible_collections.graviton.llama_rpc.plugins.filter.model_parts import model_parts
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import model_source

HF = "https://huggingface.co/org/repo/resolve/main/Q4_K_M"
SUM = "a" * 64


def test_one_file_from_a_url():
    model = model_parts(HF + "/model.gguf?download=true", sha256=SUM)
    assert model["problems"] == [] and model["kind"] == "url" and model["base_name"] == "model"
    # a download's place is its release's (model_fetch): none yet
    assert model["parts"] == [{"number": 1, "src": HF + "/model.gguf?download=true", "name": "model.gguf",
                               "file": "model.gguf", "sha256": SUM}]
    assert model["model_path"] == ""


def test_a_set_from_its_first_part_expands_to_every_part_by_name():
    model = model_parts(HF + "/big-00001-of-00003.gguf?download=true", sha256=["a" * 64, "b" * 64, "C" * 64])
    assert model["problems"] == [] and model["model_path"] == ""
    assert [part["file"] for part in model["parts"]] == ["big-0000%d-of-00003.gguf" % n for n in (1, 2, 3)]
    assert [part["src"] for part in model["parts"]] == [HF + "/big-0000%d-of-00003.gguf?download=true" % n for n in (1, 2, 3)]
    assert [part["sha256"] for part in model["parts"]] == ["a" * 64, "b" * 64, "c" * 64]
    assert model["base_name"] == "big"


def test_a_set_as_a_list_and_renamed_keeps_llama_cpps_pattern():
    sources = ["s3://bucket/models/big-0000%d-of-00002.gguf" % n for n in (1, 2)]
    model = model_parts(sources, sha256sums="s3://bucket/models/SHA256SUMS", name="renamed.gguf")
    assert model["problems"] == [] and model["checksums"] == "sha256sums" and model["kind"] == "s3"
    assert [part["file"] for part in model["parts"]] == ["renamed-00001-of-00002.gguf", "renamed-00002-of-00002.gguf"]
    # looked up in the checksum file by the names they are published under
    assert [part["name"] for part in model["parts"]] == ["big-00001-of-00002.gguf", "big-00002-of-00002.gguf"]
    assert all("dest" not in part for part in model["parts"])
    assert model["base_name"] == "renamed"


def test_a_path_is_used_in_place():
    model = model_parts("/data/big-00001-of-00002.gguf")
    assert model["problems"] == [] and model["checksums"] == "none"
    assert [part["dest"] for part in model["parts"]] == ["/data/big-00001-of-00002.gguf", "/data/big-00002-of-00002.gguf"]


def test_paths_are_written_plainly_as_the_role_finds_them_on_the_master():
    """rpc_master looks the parts up by path among what ansible.builtin.find returns, which writes them plainly."""
    model = model_parts("/data//models/./big-00001-of-00002.gguf")
    assert [part["dest"] for part in model["parts"]] == ["/data/models/big-00001-of-00002.gguf", "/data/models/big-00002-of-00002.gguf"]
    assert [part["src"] for part in model["parts"]] == [part["dest"] for part in model["parts"]]
    assert model["model_path"] == "/data/models/big-00001-of-00002.gguf"
    assert [part["file"] for part in model["parts"]] == ["big-00001-of-00002.gguf", "big-00002-of-00002.gguf"]


@pytest.mark.parametrize("source, arguments, message", [
    ("", {}, "rpc_master_model_src=(empty) is not a model source"),
    ("ftp://example.org/m.gguf", {}, "rpc_master_model_src=ftp://example.org/m.gguf is not a model source. Set it to an "
                                     "absolute path on the master, an http(s):// URL or s3://bucket/key of a .gguf file"),
    ("models/m.gguf", {}, "is not a model source. Set it to an absolute path"),
    (["/a/m-00001-of-00002.gguf", "https://x.org/m-00002-of-00002.gguf"], {}, "all of one kind"),
    (HF + "/big-00002-of-00003.gguf", {"sha256sums": HF + "/SUMS"},
     "is part 2 of 3 of a multi-part set: point it at the first part, big-00001-of-00003.gguf"),
    ([HF + "/big-00002-of-00002.gguf", HF + "/big-00001-of-00002.gguf"], {"sha256sums": HF + "/SUMS"},
     "lists 2 parts named big-00002-of-00002.gguf, big-00001-of-00002.gguf: a set's parts must be listed in order"),
    (HF + "/m.gguf", {}, "rpc_master_model_sha256 (one per part) or rpc_master_model_sha256sums is required for a download"),
    (HF + "/m.gguf", {"sha256": "abc"}, "must be sha256 checksums (64 hex digits), got 'abc'"),
    (HF + "/big-00001-of-00003.gguf", {"sha256": SUM}, "gives 1 checksum(s) for 3 part(s): give a list of one per part"),
    (HF + "/m.gguf", {"sha256": SUM, "sha256sums": HF + "/SUMS"}, "set one of rpc_master_model_sha256 and rpc_master_model_sha256sums"),
    (HF + "/m.gguf", {"sha256sums": "SUMS"}, "rpc_master_model_sha256sums=SUMS is not a checksum file"),
    (HF + "/m.gguf", {"sha256": SUM, "name": "../etc/m.gguf"}, "rpc_master_model_name=../etc/m.gguf must be a file name"),
])
def test_each_bad_input_is_named_with_its_fix(source, arguments, message):
    problems = model_parts(source, **arguments)["problems"]
    assert any(message in problem for problem in problems), problems


def test_every_problem_is_reported_at_once():
    problems = model_parts(HF + "/big-00002-of-00003.gguf", sha256=SUM, name="a/b")["problems"]
    assert len(problems) == 3, problems


def test_checksum_files_in_sha256sums_format():
    text = "# sums\n%s  big-00001-of-00002.gguf\n%s *Q4_K_M/big-00002-of-00002.gguf\nnot a line\n" % ("A" * 64, "b" * 64)
    assert model_source.parse_sha256sums(text) == {"big-00001-of-00002.gguf": "a" * 64, "big-00002-of-00002.gguf": "b" * 64}
