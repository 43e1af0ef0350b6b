"""module_utils/host/cpu_flags.py: a CPU read from /proc/cpuinfo, the ggml flags that match it, and whether a build runs
on a CPU (a feature its flags promise and the CPU lacks is named)."""

from pathlib import Path

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.host.cpu_flags import CpuInfoError, describe_cpu, missing_features

DATA = Path(__file__).resolve().parents[3] / "data" / "cpuinfo"
EC2 = "Amazon EC2\n"


def sample(name):
    return (DATA / name).read_text()


def record_for(name, architecture="aarch64"):
    cpu = describe_cpu(sample(name), architecture, EC2)
    return {"id": "b11312-test", "cpu": {"name": cpu["cpu_name"]}, "cmake_args": cpu["cmake_args"],
            "required_features": cpu["required_features"]}


@pytest.mark.parametrize(
    "name, architecture, cpu_name, arm_arch, system_info",
    [
        ("graviton2-c6g.txt", "aarch64", "Graviton2", "armv8.2-a+dotprod+fp16", ["NEON", "ARM_FMA", "FP16_VA", "DOTPROD"]),
        ("graviton3-c7g.txt", "aarch64", "Graviton3", "armv8.4-a+sve+i8mm+bf16+fp16",
         ["NEON", "ARM_FMA", "FP16_VA", "DOTPROD", "MATMUL_INT8", "SVE"]),
        ("graviton4-c8g.txt", "arm64", "Graviton4", "armv9-a+i8mm+bf16",
         ["NEON", "ARM_FMA", "FP16_VA", "DOTPROD", "MATMUL_INT8", "SVE"]),
        ("x86_64-avx2-amd-epyc.txt", "x86_64", "AMD EPYC", None, ["SSE3", "AVX", "AVX2", "BMI2", "FMA", "F16C"]),
        ("x86_64-avx512-intel-icelake.txt", "amd64", "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", None,
         ["SSE3", "AVX", "AVX2", "BMI2", "FMA", "F16C", "AVX512", "AVX512_VBMI", "AVX512_VNNI"]),
    ],
)
def test_detection_and_flags(name, architecture, cpu_name, arm_arch, system_info):
    cpu = describe_cpu(sample(name), architecture, EC2)
    assert cpu["cpu_name"] == cpu_name
    assert cpu["arm_arch"] == arm_arch
    assert cpu["system_info"] == system_info
    assert cpu["cmake_args"][0] == "-DGGML_NATIVE=OFF"
    # A build always runs on the host it was detected on.
    assert missing_features(cpu["required_features"], cpu["features"]) == []


def test_arm_flags_are_the_arch_only():
    cpu = describe_cpu(sample("graviton4-c8g.txt"), "aarch64", EC2)
    assert cpu["cmake_args"] == ["-DGGML_NATIVE=OFF", "-DGGML_CPU_ARM_ARCH=armv9-a+i8mm+bf16"]
    assert cpu["architecture"] == "aarch64" and cpu["core"] == "Neoverse V2" and cpu["vendor"] == "Amazon"


def test_x86_flags_follow_cpuinfo():
    avx2 = describe_cpu(sample("x86_64-avx2-amd-epyc.txt"), "x86_64")["cmake_args"]
    avx512 = describe_cpu(sample("x86_64-avx512-intel-icelake.txt"), "x86_64")["cmake_args"]
    assert "-DGGML_AVX2=ON" in avx2 and "-DGGML_AVX512=OFF" in avx2
    assert "-DGGML_AVX512=ON" in avx512 and "-DGGML_AVX512_VNNI=ON" in avx512
    # Ice Lake has no AVX512-BF16: it must not be compiled in.
    assert "-DGGML_AVX512_BF16=OFF" in avx512


def test_neoverse_v2_off_ec2_is_not_called_graviton():
    cpu = describe_cpu(sample("graviton4-c8g.txt"), "aarch64", "NVIDIA\n")
    assert cpu["cpu_name"] == "Neoverse V2" and cpu["vendor"] == "Arm"
    # ... but the flags come from the features, so they are the same.
    assert cpu["arm_arch"] == "armv9-a+i8mm+bf16"


def test_unknown_arm_core_gets_the_tier_its_features_allow():
    text = sample("graviton3-c7g.txt").replace("0xd40", "0xfff")
    cpu = describe_cpu(text, "aarch64", EC2)
    assert cpu["cpu_name"] == "generic aarch64" and cpu["arm_arch"] == "armv8.4-a+sve+i8mm+bf16+fp16"


def test_same_cpu_same_target_and_different_cpus_differ():
    targets = {name: describe_cpu(sample(name), "x86_64" if name.startswith("x86") else "aarch64")["target_id"]
               for name in [p.name for p in DATA.glob("*.txt")]}
    assert len(set(targets.values())) == len(targets)
    again = describe_cpu(sample("graviton4-c8g.txt"), "aarch64", "")["target_id"]
    assert again == targets["graviton4-c8g.txt"], "the DMI vendor must not change the build target"


@pytest.mark.parametrize(
    "built_on, runs_on, must_lack",
    [
        ("graviton4-c8g.txt", "graviton3-c7g.txt", {"sve2"}),
        ("graviton4-c8g.txt", "graviton2-c6g.txt", {"sve", "sve2", "i8mm", "bf16"}),
        ("graviton3-c7g.txt", "graviton2-c6g.txt", {"sve", "i8mm", "bf16"}),
        ("x86_64-avx512-intel-icelake.txt", "x86_64-avx2-amd-epyc.txt", {"avx512f", "avx512_vnni"}),
    ],
)
def test_a_build_is_refused_where_features_are_missing(built_on, runs_on, must_lack):
    arch = "x86_64" if built_on.startswith("x86") else "aarch64"
    build = describe_cpu(sample(built_on), arch)
    host = describe_cpu(sample(runs_on), arch)
    assert must_lack <= set(missing_features(build["required_features"], host["features"]))


def test_older_cpus_run_newer_cpus_nothing_is_missing_the_other_way():
    build = describe_cpu(sample("graviton2-c6g.txt"), "aarch64")
    for newer in ("graviton3-c7g.txt", "graviton4-c8g.txt"):
        assert missing_features(build["required_features"], describe_cpu(sample(newer), "aarch64")["features"]) == []


@pytest.mark.parametrize(
    "text, architecture, message",
    [
        ("x86_64-avx2-amd-epyc.txt", "aarch64", "no 'Features' line"),
        ("graviton4-c8g.txt", "x86_64", "no 'flags' line"),
        ("graviton4-c8g.txt", "riscv64", "architecture 'riscv64' is not supported"),
        ("processor\t: 0\nFeatures\t: fp evtstrm crc32\n", "aarch64", "lacks Advanced SIMD"),
    ],
)
def test_errors_say_what_is_wrong(text, architecture, message):
    text = sample(text) if text.endswith(".txt") else text
    with pytest.raises(CpuInfoError, match=message):
        describe_cpu(text, architecture)


def test_arm_arch_override_that_the_cpu_lacks_is_reported():
    cpu = describe_cpu(sample("graviton3-c7g.txt"), "aarch64", arm_arch="armv9-a+i8mm+bf16")
    assert cpu["cmake_args"] == ["-DGGML_NATIVE=OFF", "-DGGML_CPU_ARM_ARCH=armv9-a+i8mm+bf16"]
    assert "sve2" in cpu["missing_features"]


def test_arm_arch_override_within_the_cpu_is_fine_and_changes_the_target():
    detected = describe_cpu(sample("graviton4-c8g.txt"), "aarch64")
    lower = describe_cpu(sample("graviton4-c8g.txt"), "aarch64", arm_arch="armv8.2-a+dotprod+fp16")
    assert lower["missing_features"] == [] and lower["target_id"] != detected["target_id"]


@pytest.mark.parametrize("arm_arch, message", [
    ("armv7-a", "-march base 'armv7-a'"),
    ("armv9-a+sme", "-march extension 'sme'"),
])
def test_arm_arch_override_that_is_not_understood(arm_arch, message):
    with pytest.raises(CpuInfoError, match=message):
        describe_cpu(sample("graviton4-c8g.txt"), "aarch64", arm_arch=arm_arch)


def test_arm_arch_on_x86_is_refused():
    with pytest.raises(CpuInfoError, match="an Arm -march"):
        describe_cpu(sample("x86_64-avx2-amd-epyc.txt"), "x86_64", arm_arch="armv8-a")


def test_x86_option_in_extra_args_overrides_and_is_checked():
    cpu = describe_cpu(sample("x86_64-avx2-amd-epyc.txt"), "x86_64", extra_cmake_args=["-DGGML_AVX512=ON", "-DLLAMA_FOO=1"])
    assert "-DGGML_AVX512=ON" in cpu["cmake_args"] and "-DGGML_AVX512=OFF" not in cpu["cmake_args"]
    assert cpu["cmake_args"][-1] == "-DLLAMA_FOO=1"
    assert cpu["build_args"] == ["-DLLAMA_FOO=1"]  # the CPU option is the CPU's, not the build's
    assert {"avx512f", "avx512bw"} <= set(cpu["missing_features"])
    off = describe_cpu(sample("x86_64-avx2-amd-epyc.txt"), "x86_64", extra_cmake_args=["-DGGML_AVX2=OFF"])
    assert "-DGGML_AVX2=OFF" in off["cmake_args"] and "avx2" not in off["required_features"]


def test_native_requires_an_identical_cpu():
    cpu = describe_cpu(sample("graviton4-c8g.txt"), "aarch64", native=True)
    assert cpu["cmake_args"] == ["-DGGML_NATIVE=ON"]
    assert cpu["required_features"] == cpu["features"] and cpu["missing_features"] == []
    assert cpu["target_id"] != describe_cpu(sample("graviton4-c8g.txt"), "aarch64")["target_id"]
