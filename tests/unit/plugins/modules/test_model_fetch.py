"""model_fetch against a real HTTP model host on loopback (tests/tools/model_server.py: a token, Range requests, a
download cut short), on a real three-part set written with the gguf package."""

import hashlib
import os
import re

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils import gguf, model_source
from ansible_collections.graviton.llama_rpc.plugins.modules import model_fetch

from tests.tools import llama_cpp, model_server, model_shapes
from tests.unit.plugins.module_runner import run_module

TOKEN = "hf_test_token"


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A three-part set and its SHA256SUMS, as a publisher's directory."""
    directory = tmp_path_factory.mktemp("published")
    paths = model_shapes.small("llama", directory / "big.gguf", split_max_size=6 << 20)
    model_shapes.write_sha256sums(paths, directory / "SHA256SUMS")
    return directory, paths


@pytest.fixture()
def host(published):
    directory, _paths = published
    servers = []

    def start(**options):
        server = model_server.serve(directory, llama_cpp.free_port(), token=TOKEN, **options)
        servers.append(server)
        return "http://127.0.0.1:%d" % server.server_address[1], server

    yield start
    for server in servers:
        server.shutdown()


def arguments(base, target, **extra):
    model = model_source.parts(base + "/big-00001-of-00003.gguf?download=true", sha256sums=base + "/SHA256SUMS",
                               models_dir=str(target))
    assert model["problems"] == []
    return dict(parts=[dict(part, src=part["src"]) for part in model["parts"]], sha256sums=base + "/SHA256SUMS",
                token=TOKEN, state_dir=str(target / "state"), **extra)


def sent(server):
    """Model bytes the host sent (the checksum file is fetched on every run: a few hundred bytes)."""
    return sum(count for name, count in server.RequestHandlerClass.sent.items() if name.endswith(".gguf"))


def test_a_set_is_fetched_verified_and_not_read_again(host, published, tmp_path, capsys):
    _directory, paths = published
    base, server = host()
    result = run_module(model_fetch.main, capsys, **arguments(base, tmp_path))
    assert result["done"] and result["changed"], result
    assert [part["state"] for part in result["parts"]] == ["verified"] * 3
    assert [part["verified"] for part in result["parts"]] == ["now"] * 3
    for path in paths:
        assert (tmp_path / path.name).read_bytes() == path.read_bytes()
    assert not list(tmp_path.glob("*.partial"))
    assert len(gguf.read_model(tmp_path / paths[0].name)["parts"]) == 3
    # The token reaches nothing it should not: not the result.
    assert TOKEN not in str(result)
    served = sent(server)
    again = run_module(model_fetch.main, capsys, **arguments(base, tmp_path))
    assert again["done"] and not again["changed"] and again["fetched_bytes"] == 0
    assert [part["verified"] for part in again["parts"]] == ["record"] * 3 and sent(server) == served
    # A part changed on disk (its size or time) is hashed again; recheck hashes every part.
    os.utime(tmp_path / paths[1].name, ns=(0, 0))
    touched = run_module(model_fetch.main, capsys, **arguments(base, tmp_path))
    assert [part["verified"] for part in touched["parts"]] == ["record", "now", "record"]
    full = run_module(model_fetch.main, capsys, **arguments(base, tmp_path, recheck=True))
    assert [part["verified"] for part in full["parts"]] == ["now"] * 3


def test_a_download_cut_at_half_resumes_where_it_stopped(host, published, tmp_path, capsys):
    _directory, paths = published
    size = os.path.getsize(paths[0])
    base, server = host(cuts={paths[0].name: size // 2})
    cut = run_module(model_fetch.main, capsys, **arguments(base, tmp_path, attempts=1, parallel=1))
    assert cut["failed"] and "could not be fetched after 1 attempts in a row" in cut["msg"], cut
    assert "the next run resumes" in cut["msg"]
    assert os.path.getsize(tmp_path / (paths[0].name + ".partial")) == size // 2
    resumed = run_module(model_fetch.main, capsys, **arguments(base, tmp_path, attempts=1))
    assert resumed["done"], resumed
    assert resumed["parts"][0]["resumed_from"] == size // 2
    total = sum(os.path.getsize(path) for path in paths)
    assert sent(server) <= 1.1 * total, (sent(server), total)


def test_progress_comes_back_within_a_step(host, published, tmp_path, capsys):
    """A call with step_seconds returns when its time is up, with what it has done; the next call goes on."""
    base, _server = host()
    first = run_module(model_fetch.main, capsys, **arguments(base, tmp_path, step_seconds=1))
    assert first["bytes_total"] > 0 and 0 < first["bytes_done"] <= first["bytes_total"]
    while not first["done"]:
        first = run_module(model_fetch.main, capsys, **arguments(base, tmp_path, step_seconds=1))
        assert not first.get("failed"), first
    assert first["bytes_done"] == first["bytes_total"]


@pytest.mark.parametrize("token, message", [
    ("", r"refused part (\d) \(big-0000\1-of-00003\.gguf\) \(HTTP 401\): a gated or private model needs rpc_master_model_token"),
    ("hf_other", r"refused part (\d) \(big-0000\1-of-00003\.gguf\) with the token given \(HTTP 403\): "
                 r"rpc_master_model_token has no access"),
])
def test_a_refusing_source_says_which_variable_to_set(host, tmp_path, capsys, token, message):
    """The parts download side by side: the first refusal stops the others, so the part it names is any of them."""
    base, _server = host()
    args = arguments(base, tmp_path)
    args.update(token=token, sha256sums="")
    args["parts"][0]["sha256"] = "a" * 64
    result = run_module(model_fetch.main, capsys, **args)
    assert result["failed"] and re.search(message, result["msg"]), result["msg"]
    assert not list(tmp_path.glob("big-*"))


def test_a_wrong_checksum_for_part_two_is_refused_and_the_file_removed(host, published, tmp_path, capsys):
    _directory, paths = published
    base, _server = host()
    args = arguments(base, tmp_path, parallel=1)
    args["sha256sums"] = ""
    good = [hashlib.sha256(path.read_bytes()).hexdigest() for path in paths]
    for part, digest in zip(args["parts"], [good[0], "b" * 64, good[2]]):
        part["sha256"] = digest
    result = run_module(model_fetch.main, capsys, **args)
    assert result["failed"] and "part 2 (big-00002-of-00003.gguf) has sha256 %s after its download, not %s" % (
        good[1], "b" * 64) in result["msg"], result["msg"]
    assert not (tmp_path / paths[1].name).exists() and not (tmp_path / (paths[1].name + ".partial")).exists()


def test_a_missing_part_and_a_checksum_file_without_it(host, published, tmp_path, capsys):
    base, _server = host()
    args = arguments(base, tmp_path)
    args["parts"][2]["src"] = base + "/big-00009-of-00003.gguf"
    args["parts"][2]["name"] = "big-00009-of-00003.gguf"
    result = run_module(model_fetch.main, capsys, **args)
    assert result["failed"] and "rpc_master_model_sha256sums names no part big-00009-of-00003.gguf" in result["msg"]
    args["sha256sums"] = ""
    args["parts"][2]["sha256"] = "c" * 64
    result = run_module(model_fetch.main, capsys, **args)
    assert result["failed"] and "part 3 (big-00009-of-00003.gguf) is not at its source (HTTP 404)" in result["msg"]


def test_a_file_on_the_master_is_verified_once(published, tmp_path, capsys):
    _directory, paths = published
    parts = [{"number": 1, "name": paths[0].name, "dest": str(paths[0]),
              "sha256": hashlib.sha256(paths[0].read_bytes()).hexdigest()}]
    state = str(tmp_path / "state")
    first = run_module(model_fetch.main, capsys, parts=parts, state_dir=state)
    assert first["done"] and not first["changed"] and first["parts"][0]["verified"] == "now"
    again = run_module(model_fetch.main, capsys, parts=parts, state_dir=state)
    assert again["parts"][0]["verified"] == "record"
    wrong = [dict(parts[0], sha256="d" * 64)]
    result = run_module(model_fetch.main, capsys, parts=wrong, state_dir=state)
    assert result["failed"] and "has sha256 %s, not %s (rpc_master_model_sha256)" % (parts[0]["sha256"], "d" * 64) in result["msg"]
    assert paths[0].exists()  # never removed: the user's file
