"""cpu_features over real /proc/cpuinfo samples (tests/unit/data/cpuinfo/README.md says where each is from)."""

import json
from pathlib import Path

import pytest

from ansible_collections.graviton.llama_rpc.plugins.module_utils.host.cpu_flags import (
    CpuInfoError,
    describe_cpu,
    missing_features,
)
from ansible_collections.graviton.llama_rpc.plugins.modules import cpu_features as module

from tests.unit.plugins.module_runner import run_module

DATA = Path(__file__).resolve().parents[2] / "data" / "cpuinfo"
EC2 = "Amazon EC2\n"


def sample(name):
    return (DATA / name).read_text()


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


def test_module_returns_the_description(capsys):
    result = run_module(module.main, capsys, cpuinfo_path=str(DATA / "graviton4-c8g.txt"), architecture="aarch64",
                        dmi_vendor_path="/nonexistent")
    assert result["changed"] is False
    assert result["cpu_name"] == "Neoverse V2"
    assert result["cmake_args"] == ["-DGGML_NATIVE=OFF", "-DGGML_CPU_ARM_ARCH=armv9-a+i8mm+bf16"]


def test_module_reads_this_host(capsys):
    result = run_module(module.main, capsys)
    assert result["architecture"] in ("x86_64", "aarch64")
    assert result["features"]


def test_module_names_the_unreadable_path(capsys):
    result = run_module(module.main, capsys, cpuinfo_path="/nonexistent/cpuinfo")
    assert result["failed"] is True
    assert "cpuinfo_path /nonexistent/cpuinfo" in result["msg"]


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


def test_role_readme_table_matches_the_tiers():
    """The flag table in roles/llama_build/README.md is what the code does, row by row."""
    from ansible_collections.graviton.llama_rpc.plugins.module_utils.host.cpu_flags import ARM_TIERS, arm_arch_features

    readme = (Path(__file__).resolve().parents[4] / "roles" / "llama_build" / "README.md").read_text()
    rows = [line.split("|")[1:-1] for line in readme.splitlines() if line.startswith("| ") and "`arm" in line]
    assert [row[1].strip().strip("`") for row in rows] == [tier[0] for tier in ARM_TIERS]
    below = set()
    for row, tier in reversed(list(zip(rows, ARM_TIERS))):
        arm_arch = tier[0]
        documented = {word.strip("` ") for word in row[3].split(",")}
        assert documented == set(arm_arch_features(arm_arch)) - below, arm_arch
        below = set(arm_arch_features(arm_arch))


def _record_for(name, architecture="aarch64"):
    cpu = describe_cpu(sample(name), architecture, EC2)
    return {"id": "b11312-test", "cpu": {"name": cpu["cpu_name"]}, "cmake_args": cpu["cmake_args"],
            "required_features": cpu["required_features"]}


def test_module_refuses_a_graviton4_build_on_graviton3(capsys, tmp_path):
    record = tmp_path / "build-record.json"
    record.write_text(json.dumps(_record_for("graviton4-c8g.txt")))
    result = run_module(module.main, capsys, cpuinfo_path=str(DATA / "graviton3-c7g.txt"), architecture="aarch64",
                        build_record=str(record))
    assert result["failed"] is True
    assert "compiled for Graviton4 (-DGGML_CPU_ARM_ARCH=armv9-a+i8mm+bf16)" in result["msg"]
    assert "lacks: " in result["msg"] and "sve2" in result["msg"] and "illegal instruction" in result["msg"]


def test_module_accepts_a_build_the_cpu_can_run(capsys, tmp_path):
    record = tmp_path / "build-record.json"
    record.write_text(json.dumps(_record_for("graviton2-c6g.txt")))
    result = run_module(module.main, capsys, cpuinfo_path=str(DATA / "graviton4-c8g.txt"), architecture="aarch64",
                        build_record=str(record))
    assert "failed" not in result and result["build"]["id"] == "b11312-test"


def test_module_names_an_unreadable_record(capsys, tmp_path):
    result = run_module(module.main, capsys, cpuinfo_path=str(DATA / "graviton4-c8g.txt"), architecture="aarch64",
                        build_record=str(tmp_path / "missing.json"))
    assert result["failed"] is True and "build_record=" in result["msg"]


def test_module_reads_the_installed_builds_and_checks_each_against_the_cpu(capsys, tmp_path):
    """builds_dir: what llama_build's preflight learns of a host in the same run as the CPU (installed builds, which
    of them this CPU may run, the current one), instead of a stat, a find and a record check."""
    runs, too_new = _record_for("graviton2-c6g.txt"), _record_for("graviton4-c8g.txt")
    for name, record in (("b11312-aarch64-runs", runs), ("b11312-aarch64-toonew", too_new)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "build-record.json").write_text(json.dumps(dict(record, id=name)))
    (tmp_path / "b11312-aarch64-half").mkdir()                      # a build moved in without its record
    (tmp_path / "b11312-aarch64-torn").mkdir()
    (tmp_path / "b11312-aarch64-torn" / "build-record.json").write_text("{")
    (tmp_path / ".b11312-aarch64-runs.unpack").mkdir()              # the role's staging, never a build
    (tmp_path / "notes-1.txt").write_text("")                        # b*-* directories only
    (tmp_path / "current").symlink_to("b11312-aarch64-runs")
    result = run_module(module.main, capsys, cpuinfo_path=str(DATA / "graviton3-c7g.txt"), architecture="aarch64",
                        builds_dir=str(tmp_path))
    builds = result["installed_builds"]
    assert sorted(builds) == ["b11312-aarch64-half", "b11312-aarch64-runs", "b11312-aarch64-toonew", "b11312-aarch64-torn"]
    assert builds["b11312-aarch64-runs"]["record"]["id"] == "b11312-aarch64-runs"
    assert builds["b11312-aarch64-runs"]["problem"] == "" and builds["b11312-aarch64-runs"]["recorded"] is True
    assert builds["b11312-aarch64-runs"]["path"] == str(tmp_path / "b11312-aarch64-runs")
    assert builds["b11312-aarch64-runs"]["mtime"] == (tmp_path / "b11312-aarch64-runs").stat().st_mtime
    assert "lacks: " in builds["b11312-aarch64-toonew"]["problem"] and "illegal instruction" in builds["b11312-aarch64-toonew"]["problem"]
    half = tmp_path / "b11312-aarch64-half"
    assert builds[half.name] == dict(name=half.name, path=str(half), mtime=half.stat().st_mtime, recorded=False, record=None,
                                     problem="")
    torn = builds["b11312-aarch64-torn"]
    assert torn["recorded"] is True and torn["record"] is None and "cannot read the build record" in torn["problem"]
    assert result["current_build"] == "b11312-aarch64-runs"
    assert "failed" not in result and result["cpu_name"] == "Neoverse V1"  # no DMI vendor here: the core's name


def test_module_finds_no_builds_where_there_is_no_directory(capsys, tmp_path):
    result = run_module(module.main, capsys, cpuinfo_path=str(DATA / "graviton3-c7g.txt"), architecture="aarch64",
                        builds_dir=str(tmp_path / "none"))
    assert result["installed_builds"] == {} and result["current_build"] == ""


def test_module_names_a_builds_dir_that_is_not_a_directory(capsys, tmp_path):
    (tmp_path / "file").write_text("")
    result = run_module(module.main, capsys, cpuinfo_path=str(DATA / "graviton3-c7g.txt"), architecture="aarch64",
                        builds_dir=str(tmp_path / "file"))
    assert result["failed"] is True and f"builds_dir={tmp_path / 'file'}" in result["msg"]
