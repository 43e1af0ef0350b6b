"""Parsing llama-bench's output, the report, the chart and the comparison of two result files."""

import json
from pathlib import Path

from ansible_collections.graviton.llama_rpc.plugins.modules import bench_report as bench_report_module
from tests.unit.plugins.module_runner import run_module
from tests.unit.plugins.module_utils.llama_cpp.test_bench_results import results, staged_results


def test_module_writes_json_markdown_and_a_real_png(tmp_path, capsys):
    before = tmp_path / "before.json"
    before.write_text(json.dumps(results(tg_two=8.5)))
    result = run_module(bench_report_module.main, capsys, results=results(), dest=str(tmp_path / "out"), name="run",
                        compare_with=str(before))
    json_file, md_file, png_file = (Path(name) for name in result["files"])
    assert json.loads(json_file.read_text())["runs"][0]["workers"] == 0
    assert md_file.read_text().startswith("# Cluster benchmark")
    assert png_file.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png_file.stat().st_size > 10_000
    assert {row["figure"]: row["ratio"] for row in result["comparison"]}["tg32, 2 workers tokens/s"] == 2.0
    compared = run_module(bench_report_module.main, capsys, compare=[str(before), str(json_file)])
    assert "x2.0" in compared["comparison_text"]


def test_module_changes_only_what_differs(tmp_path, capsys):
    """The same results again: nothing written, not changed (the chart is drawn the same). Check mode writes nothing."""
    preview = run_module(bench_report_module.main, capsys, results=results(), dest=str(tmp_path / "out"), name="run",
                         _ansible_check_mode=True)
    assert preview["changed"] and not (tmp_path / "out").exists()
    first = run_module(bench_report_module.main, capsys, results=results(), dest=str(tmp_path / "out"), name="run")
    written = {name: Path(name).stat().st_mtime_ns for name in first["files"]}
    again = run_module(bench_report_module.main, capsys, results=results(), dest=str(tmp_path / "out"), name="run")
    assert first["changed"] and not again["changed"]
    assert {name: Path(name).stat().st_mtime_ns for name in again["files"]} == written
    other = run_module(bench_report_module.main, capsys, results=results(tg_two=20.0), dest=str(tmp_path / "out"), name="run")
    assert other["changed"] and json.loads(Path(other["files"][0]).read_text())["runs"][-1]["tokens_per_second"] == 20.0


def test_module_writes_the_breakdown_into_the_json_markdown_and_chart(tmp_path, capsys):
    result = run_module(bench_report_module.main, capsys, results=staged_results(), dest=str(tmp_path), name="staged")
    written = json.loads((tmp_path / "staged.json").read_text())["load"]
    assert written["summary"]["staged_over_cold"] == 0.45 and written["breakdown"]["cold"]["transfer_ms"] == 100.0
    text = (tmp_path / "staged.md").read_text()
    assert "| staged | 900 | 1000000 | 9 | 0 | 300 | 0 | 0 | 600 |" in text and "- staged over cold: 0.45" in text
    assert (tmp_path / "staged.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| cold | 2000 | 250000000 | 1000 | 240000000 | 300 | 100 | 200 | 1400 |" in result["markdown"]


def test_module_sets_each_load_beside_its_prediction_in_one_table(tmp_path, capsys):
    figures = staged_results()
    figures["load"]["predicted_ms"] = {"cold": 1000.0, "staged": 600.0, "warm": 600.0}
    text = run_module(bench_report_module.main, capsys, results=figures, dest=str(tmp_path), name="versus")["markdown"]
    assert "| cold | 2000 | 1000 | 2.0 |" in text and "| staged | 900 | 600 | 1.5 |" in text
    assert "measured over predicted" not in text  # in the table, not again in the list
