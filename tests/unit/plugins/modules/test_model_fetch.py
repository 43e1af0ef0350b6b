"""model_fetch against a real HTTP model host on loopback (tests/tools/model_server.py: a token, Range requests, a
download cut short, a source that stalls or refuses midway, a redirect to another host, a proxy), on real three-part
sets written with the gguf package: each model fetched as a release of its own beside the one served, never written
into it."""

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import time
import urllib.request

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import gguf, model_releases, model_source
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import fetch_ranges, fetch_state, fetch_transfer
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import sha256_job
from ansible_collections.graviton.llama_rpc.plugins.modules import model_fetch

from tests.tools import http_proxy, llama_cpp, model_server, model_shapes, moto_aws
from tests.unit.plugins.module_runner import run_module

TOKEN = "hf_test_token"


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A publisher's directory: a three-part set and its SHA256SUMS; in v2/ an update of it (parts 1 and 2 the same,
    part 3's weights changed), and in other/ a part of another upload of the model (a four-part one) under the name
    of this set's part 3."""
    directory = tmp_path_factory.mktemp("published")
    paths = model_shapes.small("llama", directory / "big.gguf", split_max_size=6 << 20)
    model_shapes.write_sha256sums(paths, directory / "SHA256SUMS")
    (directory / "v2").mkdir()
    for path in paths:
        shutil.copyfile(path, directory / "v2" / path.name)
    with open(directory / "v2" / paths[2].name, "r+b") as handle:  # the last tensor's last bytes: other weights
        handle.seek(-4096, os.SEEK_END)
        handle.write(os.urandom(4096))
    model_shapes.write_sha256sums(sorted((directory / "v2").glob("big-*.gguf")), directory / "v2" / "SHA256SUMS")
    (directory / "other").mkdir()
    upload = model_shapes.small("llama", directory / "other" / "big.gguf", split_max_size=5 << 20)
    shutil.copyfile(upload[2], directory / "other" / paths[2].name)
    return directory, paths


@pytest.fixture()
def host(published):
    directory, _paths = published
    servers = []

    def start(**options):
        server = model_server.serve(directory, llama_cpp.free_port(), token=options.pop("token", TOKEN), **options)
        servers.append(server)
        return "http://127.0.0.1:%d" % server.server_address[1], server

    yield start
    for server in servers:
        server.shutdown()


def arguments(base, target, prefix="", **extra):
    sums = base + prefix + "/SHA256SUMS"
    model = model_source.parts(base + prefix + "/big-00001-of-00003.gguf?download=true", sha256sums=sums)
    assert model["problems"] == []
    return dict(dict(parts=model["parts"], sha256sums=sums, token=TOKEN, models_dir=str(target / "models"),
                     state_dir=str(target / "state")), **extra)


def sent(server):
    """Model bytes the host sent (the checksum file is fetched on every run: a few hundred bytes). The host counts a
    block once the connection took it, a moment after the client may have it: read until the count stands still."""
    def count():
        return sum(value for name, value in server.RequestHandlerClass.sent.items() if name.endswith(".gguf"))
    last = count()
    while True:
        time.sleep(0.05)
        if count() == last:
            return last
        last = count()


def ask(url):
    """A GET straight to the model host (no proxy), its JSON answer."""
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=10) as answer:
        return json.loads(answer.read())


def control(base, **settings):
    """Turns a fault of the model host on (tests/tools/model_server.py)."""
    return ask("%s/_control?%s" % (base, "&".join("%s=%s" % item for item in settings.items())))


def snapshot(directory):
    """Every file under directory: (inode, size, sha256), by relative path."""
    found = {}
    for root, _dirs, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, directory)] = (os.stat(path).st_ino, os.path.getsize(path),
                                                           hashlib.sha256(handle.read()).hexdigest())
    return found


@pytest.fixture()
def served(host, published, tmp_path, capsys):
    """A master serving the set: its release fetched, and a snapshot of the release's files."""
    base, server = host()
    first = run_module(model_fetch.main, capsys, **arguments(base, tmp_path))
    assert first["done"], first
    release = first["release"]["dir"]
    return base, server, first, release, snapshot(release)


def test_a_set_is_fetched_as_a_release_verified_and_not_read_again(served, published, tmp_path, capsys):
    base, server, first, release, _files = served
    _directory, paths = published
    sums = [hashlib.sha256(path.read_bytes()).hexdigest() for path in paths]
    assert first["changed"] and first["release"]["name"] == model_releases.release_name("big", sums)
    assert first["model_path"] == os.path.join(release, "big-00001-of-00003.gguf")
    assert [part["state"] for part in first["parts"]] == ["verified"] * 3
    assert [part["verified"] for part in first["parts"]] == ["now"] * 3
    for path in paths:
        assert (tmp_path / "models" / first["release"]["name"] / path.name).read_bytes() == path.read_bytes()
    # moved into place whole: nothing left in its place of work, and the manifest names every part's checksum
    assert os.listdir(tmp_path / "models" / model_releases.INCOMING) == []
    manifest = model_releases.read_manifest(release)
    assert [part["sha256"] for part in manifest["parts"]] == sums
    assert len(gguf.read_model(first["model_path"])["parts"]) == 3
    assert TOKEN not in str(first)
    fetched = sent(server)
    again = run_module(model_fetch.main, capsys, **arguments(base, tmp_path))
    assert again["done"] and not again["changed"] and again["fetched_bytes"] == 0 and sent(server) == fetched
    assert [part["verified"] for part in again["parts"]] == ["record"] * 3
    # A part changed on disk (its time) is hashed again, never written; recheck hashes every part.
    os.utime(os.path.join(release, paths[1].name), ns=(0, 0))
    touched = run_module(model_fetch.main, capsys, **arguments(base, tmp_path))
    assert [part["verified"] for part in touched["parts"]] == ["record", "now", "record"]
    full = run_module(model_fetch.main, capsys, **arguments(base, tmp_path, recheck=True))
    assert [part["verified"] for part in full["parts"]] == ["now"] * 3


def test_new_bytes_under_the_same_name_are_a_release_beside_the_served_one(served, published, tmp_path, capsys):
    """v2: the same names, part 3's bytes changed. A release of its own: parts 1 and 2, the same bytes, are linked to
    the served release's (no byte fetched, the same inode), part 3 fetched; the served release's files keep their
    inodes, sizes and bytes."""
    base, server, first, release, files = served
    directory, paths = published
    before = sent(server)
    second = run_module(model_fetch.main, capsys, **arguments(base, tmp_path, prefix="/v2", history=[{"name": first["release"]["name"]}]))
    assert second["done"] and second["release"]["name"] != first["release"]["name"], second
    assert snapshot(release) == files
    assert os.path.dirname(second["model_path"]) == second["release"]["dir"] != release
    assert [part["verified"] for part in second["parts"]] == ["linked", "linked", "now"]
    for part, path in zip(second["parts"][:2], paths[:2]):
        assert os.stat(part["path"]).st_ino == files[path.name][0]
    size = (directory / "v2" / paths[2].name).stat().st_size
    assert second["fetched_bytes"] == size and sent(server) - before == size + 1  # and the byte its source was asked for


def mixed_set(base, published, tmp_path):
    """The set's arguments with part 3 of another upload under its name, every checksum given (so checksums pass);
    and the three files."""
    directory, paths = published
    args = arguments(base, tmp_path)
    args["sha256sums"] = ""
    args["parts"][2]["src"] = base + "/other/" + paths[2].name
    mixed = [paths[0], paths[1], directory / "other" / paths[2].name]
    for part, path in zip(args["parts"], mixed):
        part["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return args, mixed


def test_a_part_of_another_set_under_its_name_is_refused_and_nothing_switches(served, published, tmp_path, capsys):
    """Part 3 of another upload, its checksum given (so checksums pass): the set's headers say it is not part 3 of
    this set. Refused with that cause alone (no word about other file formats), the release never made, the served
    one untouched."""
    base, _server, first, release, files = served
    args, _mixed = mixed_set(base, published, tmp_path)
    result = run_module(model_fetch.main, capsys, **args)
    assert result["failed"] and not result["done"], result
    assert "every part has its checksum, but the set cannot be loaded" in result["msg"], result["msg"]
    assert "is not part 3 of the set of big-00001-of-00003.gguf" in result["msg"], result["msg"]
    assert "GGUF files only" not in result["msg"] and "convert" not in result["msg"]
    assert sorted(os.listdir(tmp_path / "models")) == sorted([model_releases.INCOMING, first["release"]["name"]])
    assert snapshot(release) == files


def test_check_mode_refuses_a_part_of_another_set_from_the_headers_before_any_weight(served, published, tmp_path, capsys,
                                                                                     monkeypatch):
    """The run's look ahead (check mode) reads each part's header from its first bytes, asking more while the header
    runs past them (a first read of 256 bytes here, then up to 1 KiB): the same part of another set is refused by name,
    nothing written, and no byte asked beyond that header's reads and the part's first byte (parts 1 and 2 are the
    served release's, read from their files)."""
    base, server, _first, _release, _files = served
    monkeypatch.setattr(fetch_transfer, "HEADER_FIRST_READ", 256)
    args, mixed = mixed_set(base, published, tmp_path)
    assert 256 < gguf.read_header(mixed[2])["data_offset"] <= 1024  # read in two steps
    before, on_disk = sent(server), sorted(str(path) for path in tmp_path.rglob("*"))
    result = run_module(model_fetch.main, capsys, _ansible_check_mode=True, **args)
    assert result["failed"], result
    assert "the set cannot be loaded, by its parts' headers read ahead of their data: " in result["msg"], result["msg"]
    assert "is not part 3 of the set of big-00001-of-00003.gguf" in result["msg"] and "Nothing of it was downloaded" \
        in result["msg"], result["msg"]
    assert result["header_bytes"] == 1024 and sent(server) - before == 1 + 1024
    assert sorted(str(path) for path in tmp_path.rglob("*")) == on_disk
    # the same set read ahead, whole: the run goes on
    good = run_module(model_fetch.main, capsys, _ansible_check_mode=True, **arguments(base, tmp_path, prefix="/v2"))
    assert not good.get("failed") and good["header_bytes"] > 0, good


def test_check_mode_reads_the_headers_of_a_source_that_answers_no_ranges_from_its_start(host, published, tmp_path, capsys):
    """A source that answers a byte range with the whole file: the header is the start of what it sends, read up to the
    first read's size (these headers fit in it) and the rest left unread."""
    _directory, paths = published
    base, _server = host()
    control(base, no_ranges=1)
    result = run_module(model_fetch.main, capsys, _ansible_check_mode=True, **arguments(base, tmp_path))
    assert not result.get("failed") and result["header_bytes"] == 3 * fetch_transfer.HEADER_FIRST_READ, result
    assert all(gguf.read_header(path)["data_offset"] < fetch_transfer.HEADER_FIRST_READ < path.stat().st_size
               for path in paths)


def test_a_download_cut_at_half_resumes_where_it_stopped(host, published, tmp_path, capsys):
    _directory, paths = published
    size = os.path.getsize(paths[0])
    base, server = host(cuts={paths[0].name: size // 2})
    cut = run_module(model_fetch.main, capsys, **arguments(base, tmp_path, attempts=1, parallel=1))
    assert cut["failed"] and "could not be fetched after 1 attempts in a row" in cut["msg"], cut
    assert "the next run resumes" in cut["msg"]
    [partial] = (tmp_path / "models" / model_releases.INCOMING).glob("*/%s.partial" % paths[0].name)
    assert os.path.getsize(partial) == size // 2
    resumed = run_module(model_fetch.main, capsys, **arguments(base, tmp_path, attempts=1))
    assert resumed["done"], resumed
    assert resumed["parts"][0]["resumed_from"] == size // 2
    total = sum(os.path.getsize(path) for path in paths)
    assert sent(server) <= 1.1 * total, (sent(server), total)


def test_a_source_that_stalls_is_given_up_and_the_served_release_stays(served, tmp_path, capsys):
    """An update (v2) whose part 3 stops after 1 MB and never sends more: given up after its attempts, with its cause;
    the served release is as it was."""
    base, _server, first, release, files = served
    control(base, stall="v2/big-00003-of-00003.gguf:1000000")
    stalled = run_module(model_fetch.main, capsys, **arguments(base, tmp_path, prefix="/v2", read_timeout=1, attempts=1,
                                                               history=[{"name": first["release"]["name"]}]))
    assert stalled["failed"] and "part 3 (big-00003-of-00003.gguf) could not be fetched after 1 attempts in a row (timed out)" \
        in stalled["msg"], stalled["msg"]
    assert snapshot(release) == files


@pytest.mark.parametrize("code, message", [
    (401, "the source refused part 2 (big-00002-of-00003.gguf) with the token given (HTTP 401): rpc_master_model_token"),
    (403, "the source refused part 2 (big-00002-of-00003.gguf) with the token given (HTTP 403): rpc_master_model_token"),
    (404, "part 2 (big-00002-of-00003.gguf) is not at its source (HTTP 404): check rpc_master_model_src"),
])
def test_a_source_that_refuses_midway_is_named(host, published, tmp_path, capsys, code, message):
    """Every source answered its first byte; then, once part 1 has come, the host refuses (a token revoked, a repository
    removed): refused with that cause, part 1's bytes kept for the next run."""
    _directory, paths = published
    base, _server = host()
    control(base, refuse_after=3 + paths[0].stat().st_size, code=code)  # the three one-byte answers, then part 1
    result = run_module(model_fetch.main, capsys, **arguments(base, tmp_path, parallel=1))
    assert result["failed"] and message in result["msg"], result["msg"]
    assert result["parts"][0]["bytes"] == paths[0].stat().st_size and result["fetched_bytes"] == paths[0].stat().st_size


def test_a_place_of_work_cleared_by_hand_is_fetched_again(host, published, tmp_path, capsys):
    """A part downloaded and being hashed, then its place of work removed (by hand, or a prune): the next call fetches
    it again rather than look for the file its hashing was about, and the stale report goes."""
    base, _server = host()
    control(base, rate=8 << 20)
    first = run_module(model_fetch.main, capsys, **arguments(base, tmp_path, step_seconds=1, parallel=3))
    assert not first["done"]
    shutil.rmtree(tmp_path / "models" / model_releases.INCOMING)
    control(base, reset=1)
    again = run_module(model_fetch.main, capsys, **arguments(base, tmp_path))
    assert again["done"], again
    reports = [json.loads(path.read_text()) for path in (tmp_path / "state").glob("*.sha256.json")]
    assert all(os.path.exists(report["path"]) for report in reports), reports


def test_a_partial_download_is_resumed_even_where_an_earlier_one_was_hashed(host, published, tmp_path, capsys):
    """A part's first quarter in its place of work, and a record that an earlier, whole file at that path was handed to
    hashing (a run whose place of work was cleared since): the part is resumed, not taken for whole."""
    _directory, paths = published
    base, _server = host()
    args = arguments(base, tmp_path)
    checking = run_module(model_fetch.main, capsys, _ansible_check_mode=True, **args)
    partial = checking["parts"][0]["path"] + ".partial"
    os.makedirs(os.path.dirname(partial))
    size = paths[0].stat().st_size
    with open(partial, "wb") as handle:
        handle.write(paths[0].read_bytes()[:size // 4])
    os.makedirs(args["state_dir"])
    with open(fetch_state.hash_report_path(args["state_dir"], partial), "w") as handle:
        json.dump({"path": partial, "identity": [size, 1, 1], "at": 0}, handle)
    resumed = run_module(model_fetch.main, capsys, **args)
    assert resumed["done"] and resumed["parts"][0]["resumed_from"] == size // 4, resumed


def test_progress_comes_back_within_a_step(host, tmp_path, capsys):
    """A call with step_seconds returns when its time is up, with what it has done; the next call goes on."""
    base, _server = host()
    control(base, rate=8 << 20)  # 32 MB at 8 MiB/s: about 4 s, several steps of 1 s
    steps = []
    while not steps or not steps[-1]["done"]:
        began = time.monotonic()
        steps.append(run_module(model_fetch.main, capsys, **arguments(base, tmp_path, step_seconds=1)))
        assert not steps[-1].get("failed") and time.monotonic() - began < 10, steps[-1]
        assert len(steps) < 60, "no progress"
    # each step but the last came back unfinished, within its bound; the last has every byte (on a loaded machine a
    # first step can end before its first byte: the next ones go on from there)
    assert len(steps) >= 2 and not any(step["done"] for step in steps[:-1]), steps
    assert steps[0]["bytes_total"] > 0 and steps[-1]["bytes_done"] == steps[-1]["bytes_total"] > 0, steps[-1]
    assert any(step["bytes_done"] > 0 for step in steps[:-1]), "no step before the last moved a byte"


def test_a_second_fetch_waits_for_the_one_under_way(host, tmp_path, capsys):
    """Calls on one master take turns: one left by a killed run holds the lock while it works; another waits (bounded
    by its step) and says for whom."""
    base, _server = host()
    args = arguments(base, tmp_path)
    os.makedirs(args["state_dir"])
    holder, _holder_pid = model_releases.fetch_lock(args["state_dir"], 1)
    try:
        waiting = run_module(model_fetch.main, capsys, **dict(args, step_seconds=1))
    finally:
        holder.close()
    assert waiting["waiting_for"] == str(os.getpid()) and not waiting["done"] and waiting["fetched_bytes"] == 0
    assert run_module(model_fetch.main, capsys, **args)["done"]


@pytest.mark.parametrize("token, message", [
    ("", r"refused part (\d) \(big-0000\1-of-00003\.gguf\) \(HTTP 401\): a gated or private model needs rpc_master_model_token"),
    ("hf_other", r"refused part (\d) \(big-0000\1-of-00003\.gguf\) with the token given \(HTTP 403\): "
                 r"rpc_master_model_token has no access"),
])
def test_a_refusing_source_says_which_variable_to_set(host, tmp_path, capsys, token, message):
    """Each source is asked for its first byte before any download: the first refusal names its part."""
    base, _server = host()
    args = arguments(base, tmp_path)
    args.update(token=token, sha256sums="")
    for part in args["parts"]:
        part["sha256"] = "a" * 64
    result = run_module(model_fetch.main, capsys, **args)
    assert result["failed"] and re.search(message, result["msg"]), result["msg"]
    assert not list((tmp_path / "models").rglob("big-*"))


def test_a_wrong_checksum_for_part_two_is_refused_and_the_download_removed(host, published, tmp_path, capsys):
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
    assert not list((tmp_path / "models").rglob(paths[1].name + "*"))
    assert not [name for name in os.listdir(tmp_path / "models") if name != model_releases.INCOMING]


def test_a_set_that_cannot_fit_is_refused_before_any_byte(host, tmp_path, capsys, monkeypatch):
    """The disk's free space as statvfs tells it, set below the set's size for the test: refused with the figures and
    the fixes, and not one byte asked for beyond each part's first."""
    base, server = host()
    monkeypatch.setattr(fetch_transfer, "free_bytes", lambda directory: 1 << 20)
    result = run_module(model_fetch.main, capsys, **arguments(base, tmp_path))
    assert result["failed"] and re.search(r"The model needs [0-9.]+ GB more in \S+, which has 0\.00 GB free\. Free space "
                                          r"there, or set rpc_master_models_dir to a larger disk\. Nothing was fetched\.",
                                          result["msg"]), result["msg"]
    assert sent(server) == 3  # the one byte asked of each part


def test_a_short_disk_makes_room_with_what_the_switch_would_remove(served, published, tmp_path, capsys, monkeypatch):
    """The disk short of room for an update (free space set below what it needs): a release the switch would remove
    anyway (not served, beyond the one kept) goes first, and the update is fetched; the served release and the one it
    takes parts from stay. With that release kept, the update is refused before its first byte, naming it."""
    base, _server, first, release, files = served
    directory, _paths = published
    old = tmp_path / "models" / "tiny-0123456789ab"
    old.mkdir()
    (old / "tiny.gguf").write_bytes(b"x" * (8 << 20))
    (old / model_releases.MANIFEST).write_text(json.dumps({"name": old.name, "parts": [{"file": "tiny.gguf", "sha256": "c" * 64}]}))
    history = [{"name": first["release"]["name"]}, {"name": old.name}]
    monkeypatch.setattr(fetch_transfer, "free_bytes", lambda directory: 1 << 20)  # part 3 of the update is 4 MB
    kept = run_module(model_fetch.main, capsys, **arguments(base, tmp_path, prefix="/v2", history=history, keep=2))
    assert kept["failed"] and "The models kept for a rollback hold tiny-0123456789ab 0.01 GB: lower rpc_master_models_kept" \
        in kept["msg"], kept["msg"]
    assert old.exists() and snapshot(release) == files
    room = run_module(model_fetch.main, capsys, **arguments(base, tmp_path, prefix="/v2", history=history, keep=1))
    assert room["done"] and room["removed"] == [old.name] and not old.exists(), room
    assert snapshot(release) == files  # served, and the source of the update's parts 1 and 2


def test_the_token_stays_with_its_host_across_a_redirect(published, tmp_path, capsys):
    """The source redirects part 2 to a CDN on another host name (localhost, where the source is 127.0.0.1): the CDN
    gets no token, the source gets it on every request."""
    directory, paths = published
    source = model_server.serve(directory, llama_cpp.free_port(), token=TOKEN)
    cdn = model_server.serve(directory, llama_cpp.free_port())
    try:
        base = "http://127.0.0.1:%d" % source.server_address[1]
        control(base, redirect="%s:http://localhost:%d/%s" % (paths[1].name, cdn.server_address[1], paths[1].name))
        result = run_module(model_fetch.main, capsys, **arguments(base, tmp_path))
        assert result["done"], json.dumps(result)
        assert not any(cdn.RequestHandlerClass.authorized[paths[1].name]), cdn.RequestHandlerClass.authorized
        assert all(all(seen) for seen in source.RequestHandlerClass.authorized.values())
        assert sent(cdn) == paths[1].stat().st_size + 1  # and the byte it was asked for first
    finally:
        source.shutdown()
        cdn.shutdown()


def test_a_proxy_from_the_environment_carries_the_download(host, published, tmp_path, capsys, monkeypatch):
    """http_proxy in the master's environment: every request goes through it (Ansible's HTTP client reads it)."""
    _directory, paths = published
    base, _server = host()
    proxy = http_proxy.serve(llama_cpp.free_port())
    try:
        monkeypatch.setenv("http_proxy", "http://127.0.0.1:%d" % proxy.server_address[1])
        monkeypatch.setenv("no_proxy", "")
        result = run_module(model_fetch.main, capsys, **arguments(base, tmp_path))
    finally:
        proxy.shutdown()
    assert result["done"], json.dumps(result)
    carried = proxy.RequestHandlerClass.forwarded
    assert {url.rsplit("/", 1)[1].split("?")[0] for url in carried} >= {path.name for path in paths} | {"SHA256SUMS"}


def test_a_missing_part_and_a_checksum_file_without_it(host, tmp_path, capsys):
    base, _server = host()
    args = arguments(base, tmp_path)
    args["parts"][2].update(src=base + "/big-00009-of-00003.gguf", name="big-00009-of-00003.gguf")
    result = run_module(model_fetch.main, capsys, **args)
    assert result["failed"] and "rpc_master_model_sha256sums names no part big-00009-of-00003.gguf" in result["msg"]
    args["sha256sums"] = ""
    for part in args["parts"]:
        part["sha256"] = "c" * 64
    result = run_module(model_fetch.main, capsys, **args)
    assert result["failed"] and "part 3 (big-00009-of-00003.gguf) is not at its source (HTTP 404)" in result["msg"]


def test_a_file_on_the_master_is_verified_once(published, tmp_path, capsys):
    _directory, paths = published
    parts = [{"number": 1, "name": paths[0].name, "dest": str(paths[0]),
              "sha256": hashlib.sha256(paths[0].read_bytes()).hexdigest()}]
    state = str(tmp_path / "state")
    first = run_module(model_fetch.main, capsys, parts=parts, state_dir=state)
    assert first["done"] and not first["changed"] and first["parts"][0]["verified"] == "now"
    assert first["model_path"] == str(paths[0]) and first["release"] is None
    again = run_module(model_fetch.main, capsys, parts=parts, state_dir=state)
    assert again["parts"][0]["verified"] == "record"
    wrong = [dict(parts[0], sha256="d" * 64)]
    result = run_module(model_fetch.main, capsys, parts=wrong, state_dir=state)
    assert result["failed"] and "has sha256 %s, not %s (rpc_master_model_sha256)" % (parts[0]["sha256"], "d" * 64) in result["msg"]
    assert paths[0].exists()  # never removed: the user's file


def test_a_hashing_process_that_died_is_started_again(host, tmp_path, capsys):
    """A host that restarts mid-hash leaves a report with no result and no process: the next call hashes again."""
    base, _server = host()
    args = arguments(base, tmp_path, step_seconds=1)
    result = run_module(model_fetch.main, capsys, **args)
    while not result["done"]:
        for report in (tmp_path / "state").glob("*.sha256.json.run"):
            state = json.loads(report.read_text())
            if "sha256" not in state:
                report.write_text(json.dumps(dict(state, pid=2 ** 22 + 1)))  # a pid no process has
        result = run_module(model_fetch.main, capsys, **args)
        assert not result.get("failed"), result
    assert all(part["state"] == "verified" for part in result["parts"])


def test_check_mode_finds_an_s3_checksum_file_s_release_by_its_sources(host, tmp_path, capsys):
    """A set in S3: the controller signs a URL for each part and for the checksum file (here, the model host's URLs
    stand for them). Before it signs anything, a check-mode call finds the release fetched from the same s3:// sources
    (recorded hashed, as a URL may carry a credential): nothing to sign or fetch."""
    base, _server = host()
    model = model_source.parts(["s3://bucket/big-0000%d-of-00003.gguf" % n for n in (1, 2, 3)],
                               sha256sums="s3://bucket/SHA256SUMS")
    args = dict(parts=model["parts"], sha256sums="s3://bucket/SHA256SUMS", token=TOKEN, models_dir=str(tmp_path / "models"),
                state_dir=str(tmp_path / "state"))
    unknown = run_module(model_fetch.main, capsys, _ansible_check_mode=True, **args)
    assert not unknown["done"] and unknown["release"] is None
    fetched = run_module(model_fetch.main, capsys, sources=["%s/big-0000%d-of-00003.gguf" % (base, n) for n in (1, 2, 3)],
                         sha256sums_url=base + "/SHA256SUMS", **args)
    assert fetched["done"], fetched
    found = run_module(model_fetch.main, capsys, _ansible_check_mode=True, **args)
    assert found["done"] and found["release"]["name"] == fetched["release"]["name"], found
    assert base not in json.dumps(model_releases.read_manifest(fetched["release"]["dir"]))


def test_parts_fetched_three_at_a_time_all_land_in_the_record(host, tmp_path, capsys):
    """The record is shared by the download threads: the next call reads none of the parts."""
    base, _server = host()
    assert run_module(model_fetch.main, capsys, **arguments(base, tmp_path, parallel=3))["done"]
    again = run_module(model_fetch.main, capsys, **arguments(base, tmp_path))
    assert [part["verified"] for part in again["parts"]] == ["record"] * 3


# ---- a part over several connections (byte ranges) ----

@pytest.fixture()
def one_file(tmp_path_factory, monkeypatch):
    """A single-file model (about 18 MB, as a 40 GB one comes) and its checksum file, ranges of 1 MiB so that it splits
    into as many as 8 connections ask; and the arguments that fetch it from a host."""
    directory = tmp_path_factory.mktemp("one-file")
    [path] = model_shapes.small("llama", directory / "whole.gguf")
    model_shapes.write_sha256sums([path], directory / "SHA256SUMS")
    monkeypatch.setattr(fetch_ranges, "SMALLEST_RANGE", 1 << 20)

    def fetch_arguments(base, target, **extra):
        model = model_source.parts(base + "/whole.gguf", sha256sums=base + "/SHA256SUMS")
        return dict(parts=model["parts"], sha256sums=base + "/SHA256SUMS", token=TOKEN, models_dir=str(target / "models"),
                    state_dir=str(target / "state"), **extra)
    return directory, path, fetch_arguments


def ranges_asked(base):
    """The Range header of each request the host had for the model's file, the one-byte probes left out."""
    return [value for value in ask(base + "/_sent")["ranges"]["whole.gguf"] if value != "bytes=0-0"]


def test_a_single_file_comes_over_several_connections_and_is_verified(one_file, tmp_path, capsys, monkeypatch):
    """Eight connections, each with its own byte range; the file verified against its sha256 by one hash that followed
    the ranges as they landed (not read again after), each byte sent once (but for a split's few MiB in flight), and no
    record of the ranges left beside the release."""
    directory, path, fetch_arguments = one_file
    server = model_server.serve(directory, llama_cpp.free_port(), token=TOKEN, rate=8 << 20)
    base = "http://127.0.0.1:%d" % server.server_address[1]
    hashes, start = [], sha256_job.start
    monkeypatch.setattr(sha256_job, "start", lambda module, *args: hashes.append(args) or start(module, *args))
    try:
        result = run_module(model_fetch.main, capsys, **fetch_arguments(base, tmp_path, connections=8))
        asked = ranges_asked(base)
        total_sent = sent(server)
    finally:
        server.shutdown()
    assert result["done"] and result["parts"][0]["verified"] == "now", json.dumps(result)
    assert result["parts"][0]["connections"] == 8
    size = os.path.getsize(path)
    spans = sorted(fetch_ranges.content_range("bytes %s/%d" % (value.split("=", 1)[1], size))[:2] for value in asked)
    planned = [(first, last) for first, last, _landed in fetch_ranges.plan(size, 8)]
    # each connection its own range; one that lagged may have lent the end of its range to another (a split)
    assert [span for span in planned if span[0] in {first for first, _last in spans}] == planned, asked
    assert total_sent <= size + 1 + (len(spans) - 8) * (4 << 20), (total_sent, asked)  # and the probe's byte
    assert len(hashes) == 1 and hashes[0][2].endswith(".partial" + fetch_ranges.SUFFIX), hashes
    placed = result["release"]["dir"]
    with open(os.path.join(placed, "whole.gguf"), "rb") as handle:
        assert hashlib.sha256(handle.read()).hexdigest() == hashlib.sha256(path.read_bytes()).hexdigest()
    assert not any(name.endswith(fetch_ranges.SUFFIX) for _root, _dirs, names in os.walk(tmp_path) for name in names)


def test_a_cut_range_resumes_on_its_own(one_file, tmp_path, capsys):
    """The first range longer than 300 kB is cut there: it is asked again from where it stopped (the connections done
    meanwhile may take halves of its rest), not from its start."""
    directory, path, fetch_arguments = one_file
    server = model_server.serve(directory, llama_cpp.free_port(), token=TOKEN, cuts={"whole.gguf": 300_000})
    base = "http://127.0.0.1:%d" % server.server_address[1]
    try:
        result = run_module(model_fetch.main, capsys, **fetch_arguments(base, tmp_path, connections=4, attempts=2))
        asked, total_sent = ranges_asked(base), sent(server)
        cut = ask(base + "/_sent")["cut"]
    finally:
        server.shutdown()
    assert result["done"], json.dumps(result)
    planned = [first for first, _last, _landed in fetch_ranges.plan(os.path.getsize(path), 4)]
    firsts = sorted(int(value.split("=")[1].split("-")[0]) for value in asked)
    assert cut == ["whole.gguf"] and set(planned) <= set(firsts), asked
    assert [first for first in firsts if first - 300_000 in planned], asked  # resumed where the cut left it
    # a range split while its connection sends: what was in flight past its new end (the sockets' buffers) is sent
    # for nothing, at most a few MiB a split
    assert total_sent <= os.path.getsize(path) + 1 + (len(firsts) - len(planned)) * (4 << 20), (total_sent, asked)


def test_ranges_cut_short_by_the_call_s_step_resume_in_the_next_call(one_file, tmp_path, capsys):
    """Calls of a second each (4 connections of 1 MB/s): each call goes on from the ranges the last one left, recorded
    beside the download; the file is fetched once in all."""
    directory, path, fetch_arguments = one_file
    server = model_server.serve(directory, llama_cpp.free_port(), token=TOKEN, rate=1 << 20)
    base = "http://127.0.0.1:%d" % server.server_address[1]
    steps = []
    try:
        while not (steps and (steps[-1]["done"] or steps[-1].get("failed"))) and len(steps) < 30:
            arguments_of_a_step = fetch_arguments(base, tmp_path, connections=4, step_seconds=1)
            steps.append(run_module(model_fetch.main, capsys, **arguments_of_a_step))
        total_sent = sent(server)
    finally:
        server.shutdown()
    assert steps[-1]["done"], steps[-1]
    parts = [step["parts"][0] for step in steps]
    # each call begins where the last one that started the part stopped; a call that landed no whole block (a slow
    # second) passes nothing on, and one whose second went before the part started leaves it as it was, so which
    # call first goes on is left to the machine's speed
    have = 0
    for part in parts:
        if "resumed_from" in part:
            assert part["resumed_from"] == have, parts
            have = part["bytes"]
    assert any(part.get("resumed_from", 0) > 0 and part["fetched"] > 0 for part in parts), parts
    assert total_sent <= os.path.getsize(path) + 4 * (1 << 20), total_sent  # at most a block per connection again


def test_a_source_that_answers_ranges_with_the_whole_file_comes_over_one_connection(one_file, tmp_path, capsys):
    directory, path, fetch_arguments = one_file
    server = model_server.serve(directory, llama_cpp.free_port(), token=TOKEN)
    base = "http://127.0.0.1:%d" % server.server_address[1]
    try:
        control(base, no_ranges=1)
        result = run_module(model_fetch.main, capsys, **fetch_arguments(base, tmp_path, connections=8))
    finally:
        server.shutdown()
    assert result["done"] and result["parts"][0]["verified"] == "now", json.dumps(result)
    assert result["parts"][0]["note"] == "its source answers no byte ranges: fetched over one connection", result
    assert "connections" not in result["parts"][0]


def test_a_file_that_changes_between_two_ranges_is_named_and_never_verified(one_file, tmp_path, capsys):
    """The source's file replaced between two calls of a download (same size, other bytes, the checksum file as it
    was): the ranges still to come are of another file (another ETag), so the part starts again and, its attempts
    spent, is refused with that cause; nothing is marked verified."""
    directory, path, fetch_arguments = one_file
    server = model_server.serve(directory, llama_cpp.free_port(), token=TOKEN, rate=1 << 20)
    base = "http://127.0.0.1:%d" % server.server_address[1]
    original = path.read_bytes()
    try:
        # calls of a second until some bytes landed: on a slow machine a call's second may go before its first block
        for _call in range(10):
            first = run_module(model_fetch.main, capsys, **fetch_arguments(base, tmp_path, connections=4, step_seconds=1))
            if first["parts"][0].get("bytes"):
                break
        assert not first["done"] and first["parts"][0]["bytes"] > 0, first
        replaced = bytearray(original)
        replaced[-4096:] = os.urandom(4096)
        path.with_suffix(".new").write_bytes(bytes(replaced))
        os.replace(path.with_suffix(".new"), path)
        second = run_module(model_fetch.main, capsys, **fetch_arguments(base, tmp_path, connections=4, attempts=1))
    finally:
        server.shutdown()
        path.write_bytes(original)
    assert second["failed"], second
    assert re.search(r"after 1 attempts in a row \(the source's file changed during the download \(its ETag was "
                     r"\"[0-9a-f-]+\", then \"[0-9a-f-]+\"\): fetched again from its start\)", second["msg"]), second["msg"]
    assert not any(name.endswith(".gguf") for _root, _dirs, names in os.walk(tmp_path / "models") for name in names)
    assert not json.loads((tmp_path / "state" / model_releases.RECORD).read_text())


def test_an_s3_object_comes_over_ranged_gets_of_its_signed_url(one_file, tmp_path, capsys):
    """An s3:// source, as the controller signs it (a presigned GET URL; moto's S3 on loopback): its byte ranges come
    over 4 connections, each answered by S3 with the object's ETag, and the part is verified against its sha256."""
    pytest.importorskip("moto")  # the lowest ansible-core's venv has no moto
    boto3 = pytest.importorskip("boto3")
    directory, path, _fetch_arguments = one_file
    with contextlib.ExitStack() as stack:
        endpoint = stack.enter_context(moto_aws.running(llama_cpp.free_port()))
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
        s3.create_bucket(Bucket="llama-models")
        s3.upload_file(str(path), "llama-models", "whole.gguf")
        signed = s3.generate_presigned_url("get_object", Params={"Bucket": "llama-models", "Key": "whole.gguf"},
                                           ExpiresIn=600)
        model = model_source.parts("s3://llama-models/whole.gguf",
                                   sha256=hashlib.sha256(path.read_bytes()).hexdigest())
        assert model["problems"] == [], model
        result = run_module(model_fetch.main, capsys, parts=model["parts"], sources=[signed], connections=4,
                            models_dir=str(tmp_path / "models"), state_dir=str(tmp_path / "state"))
    assert result["done"] and result["parts"][0]["verified"] == "now", json.dumps(result)
    assert result["parts"][0]["connections"] == 4 and "note" not in result["parts"][0], result["parts"][0]


def test_a_disk_that_fills_mid_part_is_named_and_the_next_run_resumes(one_file, tmp_path, capsys, monkeypatch):
    """The disk fills after 3 MiB have landed (a write refused with ENOSPC): the part is refused with what to free,
    nothing is verified, and once there is room the next run goes on from the ranges that landed."""
    directory, path, fetch_arguments = one_file
    server = model_server.serve(directory, llama_cpp.free_port(), token=TOKEN)
    base = "http://127.0.0.1:%d" % server.server_address[1]
    written, pwrite = [0], os.pwrite

    def filling(descriptor, data, offset):
        if written[0] + len(data) > 3 << 20:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written[0] += len(data)
        return pwrite(descriptor, data, offset)
    try:
        monkeypatch.setattr(os, "pwrite", filling)
        full = run_module(model_fetch.main, capsys, **fetch_arguments(base, tmp_path, connections=4))
        monkeypatch.setattr(os, "pwrite", pwrite)
        assert full["failed"] and "no space left in " in full["msg"] and "the next run resumes" in full["msg"], full
        assert not json.loads((tmp_path / "state" / model_releases.RECORD).read_text())
        resumed = run_module(model_fetch.main, capsys, **fetch_arguments(base, tmp_path, connections=4))
    finally:
        server.shutdown()
    assert resumed["done"] and resumed["parts"][0]["resumed_from"] >= 2 << 20, json.dumps(resumed)
