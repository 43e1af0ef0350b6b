"""The builds: the master compiled for itself and the worker of the same CPU and OS, which received the binaries;
the Debian 13 worker compiled its own, every program, with Debian 13's compiler (the stand-in for Ubuntu 24.04's newer
toolchain, where a Graviton master compiles); every node runs verified binaries and its record tells the truth. A
worker-only build (llama_build_targets) is tests/integration/test_git_source.py's."""

import json
import os
from pathlib import Path

import pytest
import testinfra.utils.ansible_runner
import yaml

from tests.tools import collection  # on sys.path through conftest.py

collection.importable()
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import llama_log  # noqa: E402  pylint: disable=wrong-import-position

RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"])
testinfra_hosts = RUNNER.get_hosts("llama_master") + RUNNER.get_hosts("llama_workers")
PREFIX = "/opt/llama.cpp"
# molecule.yml: the master and the first worker are Debian 12, the second worker Debian 13.
COMPILER, RECEIVER, OTHER_OS = "llama-master", "llama-worker-1", "llama-worker-2"
# The role's default targets (every program), unless the inventory gives a host others.
ROLE_DEFAULTS = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"]) / "roles" / "llama_build" / "defaults" / "main.yml"
BINARIES = yaml.safe_load(ROLE_DEFAULTS.read_text())["llama_build_targets"]


def targets(host):
    return RUNNER.get_variables(host.backend.get_hostname()).get("llama_build_targets", BINARIES)


def record(host):
    return json.loads(host.file(f"{PREFIX}/current/build-record.json").content_string)


def test_current_points_at_a_versioned_build(host):
    current = host.file(f"{PREFIX}/current")
    assert current.is_symlink
    assert current.linked_to.startswith(f"{PREFIX}/{os.environ['LLAMA_RPC_TEST_LLAMA_VERSION']}-x86_64-")


@pytest.mark.parametrize("binary", BINARIES)
def test_binaries_are_installed_and_run(host, binary):
    path = f"{PREFIX}/current/bin/{binary}"
    if binary not in targets(host):
        assert not host.file(path).exists, f"{binary} was not asked for"
        return
    assert host.file(path).mode == 0o755
    # static ggml: only system libraries are linked, and all of them resolve
    assert "not found" not in host.check_output(f"ldd {path}")


def test_version_is_the_pinned_source(host):
    if "llama-completion" not in targets(host):
        pytest.skip("the RPC server prints no version: test_build_record checks this build's commit")
    out = host.run(f"{PREFIX}/current/bin/llama-completion --version")
    assert f"(build 11312, commit {os.environ['LLAMA_RPC_TEST_ARCHIVE_COMMIT']})" in out.stdout + out.stderr


def test_the_cpu_probe_reports_the_features_the_flags_promise_and_computes_right(host):
    """Every build carries the role's CPU probe, which the role ran before installing it."""
    promised = record(host)["system_info"]
    out = host.run(f"{PREFIX}/current/bin/llama-cpu-probe")
    assert out.rc == 0 and "largest error" in out.stdout, out.stdout + out.stderr
    reported = llama_log.system_info(out.stdout)  # the parser of llama.cpp's own system_info line
    assert promised and all(reported.get(feature) == "1" for feature in promised), (promised, out.stdout)


def test_build_record(host):
    rec = record(host)
    assert rec["version"] == "b11312" and rec["build_number"] == 11312
    assert rec["commit"] == os.environ["LLAMA_RPC_TEST_ARCHIVE_COMMIT"]
    assert rec["rpc_protocol"] == "7.0.0"
    assert rec["source"] == {
        "type": "archive",
        "location": os.environ["LLAMA_RPC_TEST_ARCHIVE"],
        "sha256": os.environ["LLAMA_RPC_TEST_ARCHIVE_SHA256"],
        "subdir": os.environ["LLAMA_RPC_TEST_ARCHIVE_SUBDIR"],
    }
    assert rec["targets"] == targets(host)
    assert "-DGGML_NATIVE=OFF" in rec["cmake_args"] and "-DGGML_RPC=ON" in rec["cmake_args"]
    assert rec["cpu"]["architecture"] == "x86_64"
    # the host's own flags decide the ISA options: AVX2 here is on exactly when the CPU has it
    has_avx2 = " avx2 " in f" {host.check_output('grep -m1 ^flags /proc/cpuinfo')} "
    assert ("-DGGML_AVX2=ON" in rec["cmake_args"]) == has_avx2
    assert rec["compile"]["wall_seconds"] > 0 and rec["compile"]["cpu_seconds"] > 0
    assert rec["os"]["distribution"] == "Debian"


def test_one_host_compiled_for_both():
    compiler, receiver, other_os = (RUNNER.get_host(name) for name in (COMPILER, RECEIVER, OTHER_OS))
    assert record(compiler)["built_on"] == record(receiver)["built_on"] == COMPILER
    assert compiler.run("ls /var/cache/llama.cpp/build-*.log").rc == 0
    assert receiver.run("ls /var/cache/llama.cpp/build-*.log").rc != 0, "the receiver compiled too"
    assert not receiver.package("cmake").is_installed, "the receiver got compilers it does not need"
    assert record(compiler) == record(receiver)
    # another operating system is another build: compiled on that host, from the same source
    assert record(other_os)["built_on"] == OTHER_OS and record(other_os)["os"] != record(compiler)["os"]
    # the identity the master's same-build gate compares: the archive's content and the flags every CPU shares
    identities = [json.loads(node.file("/etc/ansible/facts.d/llama_rpc_build.fact").content_string)["identity"]
                  for node in (compiler, receiver, other_os)]
    assert identities[0] == identities[1] == identities[2]
    archive, sha256 = os.environ["LLAMA_RPC_TEST_ARCHIVE"], os.environ["LLAMA_RPC_TEST_ARCHIVE_SHA256"]
    assert identities[0]["source"] == f"archive {archive} (sha256 {sha256[:12]})"
    assert "-DGGML_RPC=ON" in identities[0]["flags"] and "-DGGML_NATIVE=OFF" not in identities[0]["flags"]
    assert len(identities[0]["digest"]) == 16


def test_nothing_is_left_staged(host):
    assert host.run(f"ls -d {PREFIX}/.*.partial {PREFIX}/.*.unpack").rc != 0
