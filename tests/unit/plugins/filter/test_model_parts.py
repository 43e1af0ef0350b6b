"""The model_parts filter: rpc_master_model_src read into its parts (a path, a URL, a set given by its first part or
listed), and what cannot be a source refused with a sentence."""

from ansible_collections.graviton.llama_rpc.plugins.filter.model_parts import model_parts


def test_a_url_of_a_sets_first_part_names_every_part():
    found = model_parts("https://models.example/llama-00001-of-00003.gguf", sha256sums="https://models.example/SHA256SUMS")
    assert found["kind"] == "url" and found["problems"] == [] and found["checksums"] == "sha256sums"
    assert [part["name"] for part in found["parts"]] == ["llama-0000%d-of-00003.gguf" % number for number in (1, 2, 3)]
    assert found["model_path"] == ""  # a download: its release names the path


def test_a_path_is_loaded_where_it_is():
    found = model_parts("/srv/models/tiny.gguf")
    assert found["kind"] == "path" and found["model_path"] == "/srv/models/tiny.gguf" and found["problems"] == []


def test_what_is_not_a_source_is_refused_with_the_fix():
    found = model_parts("ftp://models.example/tiny.gguf")
    assert found["parts"] == [] and "is not a model source" in found["problems"][0]
    listed = model_parts(["https://m.example/a-00002-of-00002.gguf", "https://m.example/a-00001-of-00002.gguf"])
    assert "must be listed in order" in " ".join(listed["problems"])
