"""The cpu_probe_problem filter, the llama_build role's verdict on a build before it installs it, on the probe's recorded
runs: the x86 build here, the Graviton3 build under qemu, and the Graviton4 build on a Neoverse N1, which dies."""

import pytest
from ansible_collections.graviton.llama_rpc.plugins.filter.cpu_probe_problem import cpu_probe_problem

X86 = ("system_info: CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 | "
       "OPENMP = 1 | REPACK = 1 | \nmatmul 64x256: largest error 4.11e-07\n")
X86_PROMISED = ["SSE3", "AVX", "AVX2", "BMI2", "FMA", "F16C"]  # the x86 build's record here
GRAVITON3 = ("system_info: CPU : NEON = 1 | ARM_FMA = 1 | FP16_VA = 1 | MATMUL_INT8 = 1 | SVE = 1 | DOTPROD = 1 | "
             "SVE_CNT = 32 | OPENMP = 1 | REPACK = 1 | \nmatmul 64x256: largest error 2.41e-07\n")
GRAVITON3_PROMISED = ["NEON", "ARM_FMA", "FP16_VA", "DOTPROD", "MATMUL_INT8", "SVE"]


@pytest.mark.parametrize("stdout, promised", [(X86, X86_PROMISED), (GRAVITON3, GRAVITON3_PROMISED)])
def test_a_build_that_is_right_for_the_host_passes(stdout, promised):
    assert cpu_probe_problem({"rc": 0, "stdout": stdout, "stderr": ""}, promised, "worker-1") == ""


def test_a_feature_the_flags_promise_and_the_build_lacks_is_named():
    """The compiler ignored a flag: the build runs, but without what it was built for."""
    problem = cpu_probe_problem({"rc": 0, "stdout": X86.replace("AVX2 = 1", "AVX2 = 0"), "stderr": ""}, X86_PROMISED, "worker-1")
    assert problem.startswith("worker-1: the build reports system_info: CPU : SSE3 = 1"), problem
    assert "its flags promise SSE3, AVX, AVX2, BMI2, FMA, F16C = 1; missing: AVX2." in problem
    assert "The compiler ignored the flags (check llama_build_cmake_args and the compiler)." in problem


def test_a_feature_absent_from_the_line_is_missing_too():
    problem = cpu_probe_problem({"rc": 0, "stdout": GRAVITON3, "stderr": ""}, GRAVITON3_PROMISED + ["SVE2"], "worker-1")
    assert "missing: SVE2." in problem, problem


def test_a_wrong_matrix_product_is_told_apart_from_a_missing_feature():
    stdout = X86.replace("4.11e-07", "3.70e+01")
    problem = cpu_probe_problem({"rc": 1, "stdout": stdout, "stderr": ""}, X86_PROMISED, "worker-1")
    assert problem == ("worker-1: ggml's matrix product differs from plain C (matmul 64x256: largest error 3.70e+01): this "
                       "build computes wrong on worker-1's CPU; check llama_build_cmake_args and the compiler."), problem


def test_a_build_for_a_newer_cpu_dies_and_the_signal_is_named():
    """The Graviton4 build on a Neoverse N1 under qemu: killed by SIGILL before its first line (recorded: rc -4, as
    Ansible's command module reports a signal)."""
    result = {"rc": -4, "stdout": "", "stderr": "qemu: uncaught target signal 4 (Illegal instruction) - core dumped"}
    problem = cpu_probe_problem(result, GRAVITON3_PROMISED, "worker-1")
    assert problem.startswith("worker-1: the build's CPU probe died with SIGILL (an instruction this CPU does not have): "
                              "this build cannot run on worker-1's CPU"), problem
    assert problem.endswith("It said: qemu: uncaught target signal 4 (Illegal instruction) - core dumped"), problem


def test_a_probe_that_prints_no_system_info_line_is_a_problem():
    problem = cpu_probe_problem({"rc": 127, "stdout": "", "stderr": "error while loading shared libraries: libgomp.so.1"},
                                X86_PROMISED, "worker-1")
    assert problem.startswith("worker-1: the build's CPU probe printed no system_info line (exit 127)"), problem
    assert "libgomp.so.1" in problem
