"""Bad input to llama_build fails with a message that names the variable to change, and nothing is
installed. Real ansible-playbook runs against a real systemd container."""

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.bad_input import assert_refused
from tests.tools import containers

PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "llama_build.yml"
NETWORK = "llama-rpc-badinput"
HOST = "llama-rpc-badinput"


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """The throwaway host, an x86 CPU without AVX-512: this machine's /proc/cpuinfo with those flags taken out, mounted
    over the host's own (runc admits /proc/cpuinfo as a mount, for lxcfs). cpu_features reads that file, so a flag the
    user asks for and the CPU lacks is refused on any test machine, one with every x86 option ggml knows too."""
    directory = tmp_path_factory.mktemp("inventory")
    cpuinfo = directory / "cpuinfo"
    cpuinfo.write_text("".join(without_avx512(line) for line in Path("/proc/cpuinfo").read_text().splitlines(keepends=True)))
    with containers.throwaway_host(HOST, NETWORK, directory,
                                   volumes={str(cpuinfo): {"bind": "/proc/cpuinfo", "mode": "ro"}}) as started:
        yield started


def without_avx512(line):
    key, sep, value = line.partition(":")
    if not sep or key.strip() != "flags":
        return line
    return key + sep + " " + " ".join(flag for flag in value.split() if not flag.startswith("avx512")) + "\n"


def converge(host, tmp_path, **overrides):
    container, inventory = host
    extra = dict(containers.archive_source_vars(), llama_build_controller_cache=str(tmp_path / "builds"), **overrides)
    result = containers.run_playbook(inventory, PLAYBOOK, extra)
    untouched = containers.run(container, ["test", "!", "-e", "/opt/llama.cpp/current"])[0] == 0
    return result, untouched


# The input rules, case by case, are unit tests (tests/unit/plugins/module_utils/input_rules/); these prove end
# to end that a refusal installs nothing, and the host's own checks (archive, CPU, disk, compiler).
CASES = {
    "old pin": ({"llama_build_version": "b8000"}, ["older than b8492", "CVE-2026-34159", "llama_build_allow_vulnerable_version"]),
    "wrong checksum": ({"llama_build_archive_sha256": "0" * 64}, ["llama_build_archive_sha256 says", "has sha256"]),
    "missing archive": ({"llama_build_archive_src": "/nonexistent/llama.tar.gz"}, ["does not exist", "llama_build_archive_src"]),
    "missing sub-directory": ({"llama_build_archive_subdir": "llama_cpp_python-0.3.36/vendor/nope"},
                              ["llama_build_archive_subdir=llama_cpp_python-0.3.36/vendor/nope is not in"]),
    "arm flags on x86": ({"llama_build_arm_arch": "armv9-a+i8mm+bf16"}, ["Check llama_build_arm_arch", "x86_64 host"]),
    "full disk": ({"llama_build_min_free_compile_mb": 10 ** 9}, ["llama_build_work_dir=", "llama_build_min_free_compile_mb="]),
    "no compiler": ({"llama_build_install_packages": False}, ["no compiler available", "llama_build_install_packages: true"]),
    "a patch written for another pin": ({"llama_build_version": "b11400", "llama_build_patches": ["rpc_hash_ahead"]},
                                        ["rpc_hash_ahead, which is written for llama.cpp b11312, not for "
                                         "llama_build_version=b11400"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_refused_by_name(host, tmp_path, case):
    overrides, messages = CASES[case]
    result, untouched = converge(host, tmp_path, **overrides)
    assert_refused(case, result, messages, untouched)


def test_flags_the_cpu_lacks_are_refused_by_name(host, tmp_path):
    result, untouched = converge(host, tmp_path, llama_build_cmake_args=["-DGGML_AVX512=ON"])
    assert result.returncode != 0
    assert "lacks: avx512bw, avx512cd, avx512dq, avx512f, avx512vl" in result.stdout, result.stdout[-3000:]
    assert "check llama_build_cmake_args" in result.stdout and untouched


def test_unknown_git_ref_is_refused_by_name(host, tmp_path):
    """The git source path on a host without git (the role installs it), against a real repository (file://) that
    lacks the tag: refused before the compilers are installed."""
    container = host[0]
    seed, bare = tmp_path / "seed", tmp_path / "llama.git"
    for command in (["git", "init", "-q", str(seed)],
                    ["git", "-C", str(seed), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "seed"],
                    ["git", "-C", str(seed), "tag", "b11312"],
                    ["git", "clone", "-q", "--bare", str(seed), str(bare)]):
        subprocess.run(command, check=True)
    assert containers.sh(container, "rm -rf /srv/llama.git && mkdir -p /srv")[0] == 0
    container.put_archive("/srv", containers.tar_of(bare))
    result, untouched = converge(host, tmp_path, llama_build_source="git", llama_build_git_repo="file:///srv/llama.git",
                                 llama_build_version="b99999")
    assert result.returncode != 0
    assert "Could not check out llama_build_version=b99999 from llama_build_git_repo=file:///srv/llama.git" in result.stdout
    assert "TASK [graviton.llama_rpc.common : Install git]" in result.stdout
    assert "Install build-essential" not in result.stdout, "the compilers were installed before the checkout"
    assert untouched


def test_a_patch_that_does_not_fit_the_source_is_refused_before_the_compilers(host, tmp_path):
    """An archive labelled with the patch's release whose code differs where the patch changes it (a line of the RPC
    client's set_tensor edited): the role tries the patch on the source after fetching it, and refuses, naming the patch
    and what did not fit, before any compiler is installed; nothing is installed."""
    import io
    import tarfile
    subdir = os.environ["LLAMA_RPC_TEST_ARCHIVE_SUBDIR"]
    edited = tmp_path / "edited.tar.gz"
    with tarfile.open(os.environ["LLAMA_RPC_TEST_ARCHIVE"]) as pinned, tarfile.open(edited, "w:gz") as out:
        for member in ("CMakeLists.txt", "ggml/src/ggml-rpc/ggml-rpc.cpp", "src/llama-model-loader.cpp"):
            info = pinned.getmember(f"{subdir}/{member}")
            data = pinned.extractfile(info).read()
            if member.endswith("ggml-rpc.cpp"):
                data = data.replace(b"request->hash = fnv_hash((const uint8_t*)data, size);",
                                    b"request->hash = fnv_hash((const uint8_t *) data, size);")
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
    digest = hashlib.sha256(edited.read_bytes()).hexdigest()
    result, untouched = converge(host, tmp_path, llama_build_archive_src=str(edited), llama_build_archive_sha256=digest,
                                 llama_build_patches=["rpc_hash_ahead"])
    assert result.returncode != 0
    assert "The patch rpc_hash_ahead (llama_build_patches) does not apply to the llama.cpp source of b11312" in result.stdout, \
        result.stdout[-3000:]
    assert "FAILED" in result.stdout and "ggml-rpc.cpp" in result.stdout, result.stdout[-3000:]
    assert "Install build-essential" not in result.stdout, "the compilers were installed before the patch was tried"
    assert untouched
