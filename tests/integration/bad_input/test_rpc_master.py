"""Bad input to rpc_master fails with a message that says what to change, before any change on the
master. Real ansible-playbook runs against a real systemd container; the workers are inventory entries
only (the pre-flight refuses before it would contact them). The model's sources: a path on the master and a model host
on its loopback that wants a token (tests/tools/model_server.py), with a three-part set and a part of another set."""

import hashlib
import re
from pathlib import Path

import pytest

from tests.integration.bad_input import assert_refused
from tests.tools import containers, model_shapes, tiny_model

ROOT = Path(__file__).resolve().parents[3]
PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "rpc_master.yml"
NETWORK = "llama-rpc-master-badinput"
HOST = "llama-rpc-master-badinput"
MODEL = "/srv/tiny.gguf"
BASE = {"rpc_master_model_src": MODEL, "rpc_master_server_api_key": "test-key"}
TOKEN = "bad-input-token"
HOSTED = "http://127.0.0.1:8000"


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    directory = tmp_path_factory.mktemp("master")
    with containers.throwaway_host(HOST, NETWORK, directory) as (container, _inventory):
        model = tiny_model.write_model(directory / "tiny.gguf")
        container.exec_run(["mkdir", "-p", "/srv/set", "/srv/mixed", "/srv/hosted", "/srv/missing"])
        container.put_archive("/srv", containers.tar_of(model))
        container.exec_run(["sh", "-c", "echo 'not a model' > /srv/notes.gguf"])
        # a tensor of a type the pinned llama.cpp does not have: refused by name, so no cache is pruned for it
        unknown = model_shapes.with_type(directory / "unknown-type.gguf", model, "blk.0.ffn_up.weight", 99)
        container.put_archive("/srv", containers.tar_of(unknown))
        # a three-part set; the same with its part 2 from another set (a set of other part sizes)
        (directory / "set").mkdir()
        (directory / "other").mkdir()
        parts = model_shapes.small("llama", directory / "set" / "big.gguf", split_max_size=6 << 20)
        other = model_shapes.small("llama", directory / "other" / "big.gguf", split_max_size=5 << 20)
        for path in parts:
            for target in ("/srv/set", "/srv/hosted"):
                container.put_archive(target, containers.tar_of(path))
            container.put_archive("/srv/mixed", containers.tar_of(other[1] if path == parts[1] else path, path.name))
            if path != parts[2]:
                container.put_archive("/srv/missing", containers.tar_of(path))
        model_shapes.write_sha256sums(parts, directory / "SHA256SUMS")
        container.put_archive("/srv/hosted", containers.tar_of(directory / "SHA256SUMS"))
        container.put_archive("/usr/local/lib", containers.tar_of(ROOT / "tests" / "tools" / "model_server.py"))
        container.exec_run(["systemd-run", "--unit", "model-source", "python3", "/usr/local/lib/model_server.py",
                            "/srv/hosted", "--port", "8000", "--token", TOKEN])
        yield container, directory, hashlib.sha256(model.read_bytes()).hexdigest()


def write_inventory(directory, masters=1, workers=2):
    lines = ["[llama_master]", f"{HOST} ansible_connection=community.docker.docker"]
    lines += [f"other-master-{index} ansible_host=10.9.8.{index}" for index in range(1, masters)]
    lines += ["[llama_workers]"] + [f"worker-{index} ansible_host=10.9.9.{index}" for index in range(1, workers + 1)]
    path = directory / f"hosts-{masters}-{workers}.ini"
    path.write_text("\n".join(lines) + "\n")
    return path


def converge(host, masters=1, workers=2, tags=None, **overrides):
    container, directory, _sha = host
    result = containers.run_playbook(write_inventory(directory, masters, workers), PLAYBOOK, dict(BASE, **overrides),
                                     tags=tags)
    nothing_written = "! test -e /etc/llama-rpc && ! test -e /var/lib/llama-models && ! test -e /etc/ansible/facts.d/llama_rpc_master.fact"
    untouched = containers.sh(container, nothing_written)[0] == 0
    return result, untouched


# The settings' rules, case by case, are unit tests (tests/unit/plugins/module_utils/input_rules/, and the
# model source's in test_model_source.py); these prove end to end the host's checks (the model's files, headers,
# sources and tokens) and that a refusal writes nothing on the master.
CASES = {
    "two masters": ({"masters": 2}, ["The cluster needs exactly one master", "other-master-1"]),
    "model path that does not exist": ({"rpc_master_model_src": "/srv/missing.gguf"},
                                       ["rpc_master_model_src=/srv/missing.gguf is not a file on"]),
    "checksum mismatch": ({"rpc_master_model_sha256": "0" * 64}, ["not " + "0" * 64 + " (rpc_master_model_sha256)",
                                                                  "Check the value, or replace the file"]),
    "path to part 2 of a set": ({"rpc_master_model_src": "/srv/set/big-00002-of-00003.gguf"},
                                ["is part 2 of 3 of a multi-part set: point it at the first part, big-00001-of-00003.gguf"]),
    "a part missing beside the first": ({"rpc_master_model_src": "/srv/missing/big-00001-of-00003.gguf"},
                                        ["part 3 of 3 of big-00001-of-00003.gguf, big-00003-of-00003.gguf, is not beside it"]),
    "a part of another set": ({"rpc_master_model_src": "/srv/mixed/big-00001-of-00003.gguf"},
                              ["is not part 2 of the set of big-00001-of-00003.gguf", "Fetch every part of one set"]),
    "a download without the token": ({"rpc_master_model_src": HOSTED + "/big-00001-of-00003.gguf",
                                      "rpc_master_model_sha256sums": HOSTED + "/SHA256SUMS"},
                                     ["(HTTP 401): a gated or private model needs rpc_master_model_token"]),
    "a download with a wrong token": ({"rpc_master_model_src": HOSTED + "/big-00001-of-00003.gguf",
                                       "rpc_master_model_sha256sums": HOSTED + "/SHA256SUMS", "rpc_master_model_token": "wrong"},
                                      ["refused the checksum file (rpc_master_model_sha256sums) with the token given (HTTP 403)",
                                       "rpc_master_model_token has no access"]),
    "a part missing at its source": ({"rpc_master_model_src": HOSTED + "/big-00001-of-00004.gguf",
                                      "rpc_master_model_sha256": ["a" * 64] * 4, "rpc_master_model_token": TOKEN},
                                     # every part is missing and they are asked side by side: the first answer names any one
                                     [re.compile(r"part (\d) \(big-0000\1-of-00004\.gguf\) is not at its source \(HTTP 404\): "
                                                 r"check rpc_master_model_src")]),
    "a tensor of a type llama.cpp lacks": ({"rpc_master_model_src": "/srv/unknown-type.gguf"},
                                           ["tensor blk.0.ffn_up.weight has ggml type 99, which llama.cpp b11312 does not have",
                                            "llama_build_version"]),
    "file that is not GGUF": ({"rpc_master_model_src": "/srv/notes.gguf"},
                              ["is not a GGUF file", "llama.cpp loads GGUF files only"]),
    "server on every interface": ({"rpc_master_server_bind_address": "0.0.0.0"}, ["never 0.0.0.0"]),
    "memory fraction above 1": ({"rpc_master_memory_fraction": 1.5},
                                ["Out of range: rpc_master_memory_fraction=1.5: set it above 0 and at most 1."]),
}


# What a refusal must not add: a hint about another cause (the format hint follows only a file that is no GGUF).
UNRELATED = {"a part of another set": "llama.cpp loads GGUF files only"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_refused_with_what_to_change(host, case):
    overrides, messages = CASES[case]
    result, untouched = converge(host, **overrides)
    assert_refused(case, result, messages, untouched)
    if case in UNRELATED:
        assert UNRELATED[case] not in result.stdout + result.stderr, (result.stdout + result.stderr)[-3000:]


@pytest.mark.parametrize("tag", ["rpc_master_model", "rpc_master_configure", "rpc_master_server", "rpc_master_infer"])
def test_bad_input_is_refused_under_any_tag_of_the_role(host, tag):
    """--tags <one part of the role> still runs the pre-flight first (it skipped it, and the server part then wrote
    its settings with a bind address of 0.0.0.0)."""
    result, untouched = converge(host, tags=tag, rpc_master_infer=True, rpc_master_server_bind_address="0.0.0.0")
    assert result.returncode != 0 and "never 0.0.0.0" in result.stdout, result.stdout[-3000:]
    assert untouched, f"--tags {tag}: the master was changed"


def test_the_api_key_never_reaches_the_output(host):
    result, _untouched = converge(host, rpc_master_server_api_key="s3cr3t-never-logged", rpc_master_memory_fraction=2)
    assert result.returncode != 0
    assert "s3cr3t-never-logged" not in result.stdout + result.stderr


def test_good_input_passes_the_input_checks(host):
    """The same play with good input gets past every input check, to where llama.cpp must be installed."""
    sha = host[2]
    result, _untouched = converge(host, rpc_master_model_sha256=sha)
    assert "No llama.cpp build on" in result.stdout and "local fact llama_rpc_build" in result.stdout, result.stdout[-3000:]


def test_a_build_without_every_program_is_refused_by_name(host):
    """A build (local fact llama_rpc_build) whose bin directory lacks llama-server and ggml-rpc-server and has
    llama-fit-params without its execute bit: the three named, llama-completion not, and nothing written on the master."""
    container, _directory, sha = host
    bin_dir = "/opt/partial-build/bin"
    fake = (f"mkdir -p {bin_dir} /etc/ansible/facts.d && touch {bin_dir}/llama-completion {bin_dir}/llama-fit-params && "
            f"chmod 0755 {bin_dir}/llama-completion && chmod 0644 {bin_dir}/llama-fit-params && "
            f"echo '{{\"bin_dir\": \"{bin_dir}\"}}' > /etc/ansible/facts.d/llama_rpc_build.fact")
    assert containers.sh(container, fake)[0] == 0
    try:
        result, untouched = converge(host, rpc_master_model_sha256=sha)
    finally:
        container.exec_run(["rm", "-rf", "/opt/partial-build", "/etc/ansible/facts.d/llama_rpc_build.fact"])
    assert_refused("a build without every program", result,
                   [f"llama-fit-params, ggml-rpc-server, llama-server missing (or not executable) in {bin_dir} on {HOST}"],
                   untouched)
    assert "llama-completion, llama-fit-params, ggml-rpc-server, llama-server missing" not in result.stdout, \
        result.stdout[-3000:]


def test_a_wrong_checksum_for_part_2_is_refused_by_name(host):
    """Checksums per part: parts 1 and 3 are right, part 2's is another's. Refused with the part's file named, before
    anything on the master is written."""
    _container, directory, _sha = host
    sums = [line.split()[0] for line in (directory / "SHA256SUMS").read_text().splitlines()]
    wrong = sums[:1] + ["b" * 64] + sums[2:]
    result, untouched = converge(host, rpc_master_model_src="/srv/set/big-00001-of-00003.gguf", rpc_master_model_sha256=wrong)
    assert_refused("wrong checksum for part 2", result, [
        "/srv/set/big-00002-of-00003.gguf has sha256 %s, not %s (rpc_master_model_sha256)" % (sums[1], "b" * 64),
        "Check the value, or replace the file"], untouched)
    output = result.stdout + result.stderr
    assert "big-00001-of-00003.gguf has sha256" not in output and "big-00003-of-00003.gguf has sha256" not in output
