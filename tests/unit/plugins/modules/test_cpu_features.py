"""cpu_features over real /proc/cpuinfo samples (tests/unit/data/cpuinfo/README.md says where each is from)."""

import json
from pathlib import Path

from ansible_collections.graviton.llama_rpc.plugins.modules import cpu_features as module
from tests.unit.plugins.module_runner import run_module
from tests.unit.plugins.module_utils.host.test_cpu_flags import DATA, record_for


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


def test_module_refuses_a_graviton4_build_on_graviton3(capsys, tmp_path):
    record = tmp_path / "build-record.json"
    record.write_text(json.dumps(record_for("graviton4-c8g.txt")))
    result = run_module(module.main, capsys, cpuinfo_path=str(DATA / "graviton3-c7g.txt"), architecture="aarch64",
                        build_record=str(record))
    assert result["failed"] is True
    assert "compiled for Graviton4 (-DGGML_CPU_ARM_ARCH=armv9-a+i8mm+bf16)" in result["msg"]
    assert "lacks: " in result["msg"] and "sve2" in result["msg"] and "illegal instruction" in result["msg"]


def test_module_accepts_a_build_the_cpu_can_run(capsys, tmp_path):
    record = tmp_path / "build-record.json"
    record.write_text(json.dumps(record_for("graviton2-c6g.txt")))
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
    runs, too_new = record_for("graviton2-c6g.txt"), record_for("graviton4-c8g.txt")
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
