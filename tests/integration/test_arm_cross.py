"""The Arm flag sets are real: cross-built for aarch64 with the flags cpu_features computes for
Graviton3 and Graviton4, run under qemu-user with those CPUs' SVE vector lengths, serving an x86
master over RPC, and refused (not crashed) where the CPU lacks what the build needs.

What a Graviton node runs is built: ggml and its RPC server (a worker), llama-completion with libllama (a master, whose
program on AWS is aarch64 too), and the llama_build role's CPU probe linked with the same ggml libraries
(roles/llama_build/files/llama-cpu-probe.c, which every build carries) that prints the system_info line llama.cpp
prints and checks a matrix product. Only ggml takes the Graviton's flags (GGML_CPU_ARM_ARCH is ggml-cpu's -march):
libllama, common and llama-completion compile the same for both, so the second build takes them from the compiler
cache (on this machine: 379 CPU-seconds for the first, 4 for the second).

qemu-aarch64's "max" CPU has SVE2, i8mm and bf16; sve-default-vector-length sets the SVE width in
bytes: 32 is Graviton3-like (256-bit), 16 Graviton4-like (128-bit). "neoverse-n1" has no SVE at all.
"""

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from ansible_collections.graviton.llama_rpc.plugins.module_utils.host.cpu_flags import describe_cpu
from tests.tools import llama_cpp

ROOT = Path(__file__).resolve().parents[2]
CPUINFO = ROOT / "tests" / "unit" / "data" / "cpuinfo"
QEMU = "qemu-aarch64-static"
QEMU_ENV = {"QEMU_LD_PREFIX": "/usr/aarch64-linux-gnu", "GGML_NO_BACKTRACE": "1"}
GRAVITONS = {
    # name: (cpuinfo sample, SVE vector length in bytes of that CPU)
    "graviton3": ("graviton3-c7g.txt", 32),
    "graviton4": ("graviton4-c8g.txt", 16),
}
GENERATE = ["-p", "The cluster says", "-n", "8", "--ignore-eos", "-no-cnv", "-fit", "off", "-t", "2", "--seed", "1"]


def graviton_cpu(name):
    return describe_cpu((CPUINFO / GRAVITONS[name][0]).read_text(), "aarch64", "Amazon EC2")


@pytest.fixture(scope="module", params=sorted(GRAVITONS))
def arm_build(request):
    cpu = graviton_cpu(request.param)
    return request.param, cpu, build_for(request.param)


def build_for(graviton):
    """The aarch64 build (ggml-rpc-server and llama-completion) with that Graviton's flags, and the CPU probe linked
    with its ggml."""
    bin_dir = llama_cpp.build(f"aarch64-{graviton}", graviton_cpu(graviton)["cmake_args"],
                              ["ggml-rpc-server", "llama-completion"], toolchain="aarch64-linux-gnu.cmake")
    llama_cpp.cpu_probe(bin_dir, "aarch64-linux-gnu-g++")
    return bin_dir


def run_qemu(cpu_model, binary, *args, timeout=600):
    return subprocess.run([QEMU, "-cpu", cpu_model, str(binary), *args], env=dict(os.environ, **QEMU_ENV),
                          capture_output=True, text=True, errors="replace", timeout=timeout, check=False)


def generate(command):
    """One llama-completion run on this machine (the x86 master)."""
    # errors="replace": random weights generate bytes that are not UTF-8
    return subprocess.run(command, env=dict(os.environ, GGML_NO_BACKTRACE="1"), capture_output=True, text=True,
                          errors="replace", timeout=900, check=False)


def test_flags_and_sve_width_under_qemu(arm_build):
    """The build's ggml reports the features its flags promise, at that CPU's SVE width, and its kernels compute
    right there (tokens generated on this build: the next test)."""
    name, cpu, bin_dir = arm_build
    vector_bytes = GRAVITONS[name][1]
    result = run_qemu(f"max,sve-default-vector-length={vector_bytes}", bin_dir / "llama-cpu-probe")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    info = llama_cpp.system_info(result.stdout)
    print(f"{name}: {cpu['arm_arch']} -> system_info {info}; {result.stdout.splitlines()[-1]}")
    assert info.get("SVE") == "1" and info.get("SVE_CNT") == str(vector_bytes)
    for feature in cpu["system_info"]:
        assert info.get(feature) == "1", f"{feature} is not compiled in with {cpu['arm_arch']}"
    assert "matmul 64x256: largest error" in result.stdout


def test_the_aarch64_build_generates_alone_at_that_sve_width(arm_build, model):
    """A Graviton master's path: llama-completion of this build loads the model and decodes it on the emulated CPU by
    itself (libllama and every op of the model's graph in this build's kernels), at that CPU's SVE width."""
    name, _cpu, bin_dir = arm_build

    def once():
        result = run_qemu(f"max,sve-default-vector-length={GRAVITONS[name][1]}", bin_dir / "llama-completion",
                          "-m", str(model), *GENERATE, "-lv", "4", timeout=900)
        return result.returncode, result.stderr, result
    result = llama_cpp.until_complete(once, attempts=3)
    assert result.returncode == 0, result.stderr[-2000:]
    figures = llama_cpp.perf(result.stderr)
    print(f"{name} build alone under qemu: {figures}")
    assert llama_cpp.system_info(result.stderr).get("SVE") == "1", result.stderr[-2000:]
    assert figures["eval_runs"] == 7 and figures["eval_tps"] > 0


def test_x86_master_generates_through_an_aarch64_worker(arm_build, x86_build, model):
    name, bin_dir = arm_build[0], arm_build[2]
    # llama-completion sometimes loses its last output lines (llama_cpp.until_complete); that once repeated three
    # times against the same emulated worker, each run under a second: each retry gets a new worker.
    for attempt in range(3):
        port = llama_cpp.free_port()
        worker = subprocess.Popen([QEMU, "-cpu", f"max,sve-default-vector-length={GRAVITONS[name][1]}",
                                   str(bin_dir / "ggml-rpc-server"), "-H", "127.0.0.1", "-p", str(port), "-t", "2"],
                                  env=dict(os.environ, **QEMU_ENV), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            llama_cpp.wait_for_port(port, worker)
            result = generate([str(x86_build / "llama-completion"), "-m", str(model), "--rpc", f"127.0.0.1:{port}",
                               "-ngl", "999", *GENERATE, "-lv", "4"])
        finally:
            worker.terminate()
            worker.wait(timeout=30)
        if result.returncode != 0 or llama_cpp.complete(result.stderr):
            break
        print(f"attempt {attempt + 1}: a new worker for the next run")
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"RPC0[127.0.0.1:{port}] model buffer size" in result.stderr
    figures = llama_cpp.perf(result.stderr)
    print(f"x86 master through the {name} worker: {figures}")
    assert figures["eval_runs"] == 7 and figures["eval_tps"] > 0


def test_graviton4_build_dies_on_a_cpu_without_sve():
    """What the refusal prevents: the Graviton4 build's ggml on a Neoverse N1 (Graviton2) dies at once."""
    result = run_qemu("neoverse-n1", build_for("graviton4") / "llama-cpu-probe")
    print(f"graviton4 build on neoverse-n1: exit {result.returncode}")
    assert result.returncode == -signal.SIGILL


def test_the_role_refuses_a_graviton4_build_on_graviton3(tmp_path):
    """The check the llama_build role runs before it installs a build (cpu_features with build_record),
    given a Graviton3's /proc/cpuinfo and the Graviton4 build's record, refuses it by name."""
    cpu = graviton_cpu("graviton4")
    record = tmp_path / "build-record.json"
    record.write_text(json.dumps({"id": "b11312-aarch64-graviton4", "cpu": {"name": cpu["cpu_name"]},
                                  "cmake_args": cpu["cmake_args"], "required_features": cpu["required_features"]}))
    result = subprocess.run(
        ["ansible", "localhost", "-m", "graviton.llama_rpc.cpu_features", "-a",
         f"cpuinfo_path={CPUINFO / 'graviton3-c7g.txt'} architecture=aarch64 build_record={record}"],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode != 0
    assert "compiled for Graviton4 (-DGGML_CPU_ARM_ARCH=armv9-a+i8mm+bf16)" in result.stdout
    assert "sve2" in result.stdout and "refused" in result.stdout
