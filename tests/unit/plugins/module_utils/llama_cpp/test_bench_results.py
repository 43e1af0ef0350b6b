"""module_utils/llama_cpp/bench_results.py: llama-bench's output parsed (JSON and JSONL, and what is not llama-bench's
refused), the report's tables, the ratios of two result files, and each load's breakdown beside the load-time model's
prediction."""

import json
from pathlib import Path

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import bench_results

SAMPLE = (Path(__file__).resolve().parents[3] / "data" / "llama-bench.json").read_text()


def results(pp_one=100.0, tg_one=10.0, pp_two=180.0, tg_two=17.0, cold=2000.0, warm=500.0):
    runs = []
    for workers, pp, tg in ((0, 120.0, 12.0), (1, pp_one, tg_one), (2, pp_two, tg_two)):
        runs += [{"workers": workers, "test": "pp128", "tokens_per_second": pp}, {"workers": workers, "test": "tg32", "tokens_per_second": tg}]
    return {"runs": runs, "model": {"path": "/m.gguf", "file_size": 245_000_000}, "build": {"version": "b11312"},
            "cluster": {"workers": ["a:1", "b:1"]}, "finished_at": "2026-11-21T13:00:00+00:00",
            "load": {"cold_ms": cold, "warm_ms": warm, "cold_bytes_sent": 250_000_000, "warm_bytes_sent": 1_000_000,
                     "cold_mbit_per_s": 1000.0, "warm_mbit_per_s": 16.0},
            "network": {"raw_tcp_mbit_per_s": 20000.0, "path": "m -> a", "load_fraction_of_line_rate": 0.05},
            "concurrency": {"slots": 4, "requests_per_client": 2, "max_tokens": 32, "levels": [
                level(1, 10.0, 90.0), level(2, 19.0, 95.0), level(4, 31.0, 120.0), level(8, 33.0, 900.0)]}}


def level(clients, rate, ttft_p95):
    return {"clients": clients, "requests": 2 * clients, "failed": 0, "errors": [], "completion_tokens": 64 * clients,
            "seconds": 64 * clients / rate, "tokens_per_second": rate, "ttft_ms_p50": ttft_p95 / 2, "ttft_ms_p95": ttft_p95,
            "latency_ms_p50": 3000.0, "latency_ms_p95": 3500.0}


def staged_results():
    figures = results(cold=2000.0)
    figures["load"].update({"cold_cache_bytes_written": 240_000_000, "staged_ms": 900.0, "staged_bytes_sent": 1_000_000,
                            "staged_mbit_per_s": 8.9, "staged_cache_bytes_written": 0, "warm_cache_bytes_written": 0,
                            "master_read_hash_ms": 300.0, "hashed_bytes": 240_000_000, "worker_cache_write_mb_s": 1200.0,
                            "staging_ms": 500.0, "staging_bytes": 240_000_000})
    return figures


def test_parse_llama_bench_json_and_jsonl():
    rows = bench_results.parse_llama_bench(SAMPLE)
    assert [(row["test"], row["tokens_per_second"], row["samples"]) for row in rows] == [("pp16", 37969.742, 2), ("tg8", 3289.95, 2)]
    assert rows[0]["n_gpu_layers"] == 999 and rows[0]["n_threads"] == 2 and rows[0]["build"] == "11312 (0c1e57098)"
    jsonl = "\n".join(json.dumps(record) for record in json.loads(SAMPLE))
    assert bench_results.parse_llama_bench(jsonl) == rows


@pytest.mark.parametrize("text, message", [
    ("", "printed nothing"),
    ("| model | size |\n|---|---|", "not JSON"),
    ('[{"n_prompt": 16}]', "lacks"),
])
def test_parse_refuses_what_is_not_llama_bench_json(text, message):
    with pytest.raises(bench_results.BenchError, match=message):
        bench_results.parse_llama_bench(text)


def test_markdown_table():
    text = bench_results.markdown(results())
    assert "| Test | master alone | 1 worker | 2 workers |" in text
    assert "| pp128 | 120.00 | 100.00 | 180.00 |" in text and "| tg32 | 12.00 | 10.00 | 17.00 |" in text
    assert "| cold | 2000 | 250000000 | 1000 |" in text and "20000 Mbit/s" in text and "5% of that" in text


def test_concurrency_table_gives_each_level_against_one_client():
    text = bench_results.markdown(results())
    assert "llama-server with 4 slot(s); each client sends 2 streaming chat completion(s) of 32 tokens" in text
    assert "| 1 | 2 | 0 | 10.00 | 1.00 | 45 | 90 | 3000 | 3500 |" in text
    assert "| 4 | 8 | 0 | 31.00 | 3.10 | 60 | 120 | 3000 | 3500 |" in text
    assert bench_results.scaling(results()["concurrency"]) == {1: 1.0, 2: 1.9, 4: 3.1, 8: 3.3}
    # an older result, or a run without llama-server: no section
    assert "Concurrent clients" not in bench_results.markdown(dict(results(), concurrency={}))


def test_compare_prints_ratios():
    rows, text = bench_results.compare(results(), results(tg_two=25.5, cold=1000.0))
    by_name = {row["figure"]: row for row in rows}
    assert by_name["tg32, 2 workers tokens/s"]["ratio"] == 1.5
    assert by_name["pp128, 2 workers tokens/s"]["ratio"] == 1.0
    assert by_name["load cold_ms"]["ratio"] == 0.5
    assert by_name["llama-server, 4 clients, tokens/s"]["ratio"] == 1.0
    assert "tg32, 2 workers tokens/s" in text and "x1.5" in text


def test_compare_says_when_raw_tcp_was_measured_by_another_tool():
    before, after = results(), results()
    after["network"] = dict(after["network"], tool="iperf 3.12", raw_tcp_mbit_per_s=10000.0)
    rows, _text = bench_results.compare(before, after)
    assert [row["figure"] for row in rows if row["figure"].startswith("raw TCP")] == [
        "raw TCP Mbit/s (a Python sender -> iperf 3.12: another tool)"]
    before["network"] = dict(before["network"], tool="iperf 3.12")
    rows, _text = bench_results.compare(before, after)
    assert {row["figure"]: row["ratio"] for row in rows}["raw TCP Mbit/s"] == 0.5


def test_compare_needs_common_figures():
    with pytest.raises(bench_results.BenchError, match="no figure in common"):
        bench_results.compare({"runs": []}, {"runs": []})


def test_load_breakdown_splits_each_load_and_judges_the_staged_one():
    breakdown, summary = bench_results.load_breakdown(staged_results()["load"], 20000.0, 250_000_000, 2)
    # cold: 250 MB at 20 Gbit/s = 100 ms on the wire, 240 MB at 1200 MB/s = 200 ms into the caches, the rest 1400 ms
    assert breakdown["cold"] == {"master_read_hash_ms": 300.0, "transfer_ms": 100.0, "worker_cache_write_ms": 200.0,
                                 "other_ms": 1400.0}
    assert breakdown["staged"] == {"master_read_hash_ms": 300.0, "transfer_ms": 0.4, "worker_cache_write_ms": 0.0,
                                   "other_ms": 599.6}
    assert summary == {"staged_over_cold": 0.45, "staged_sent_fraction_of_model": 0.004, "staging_mbit_per_s": 3840.0,
                       "staging_fraction_of_raw_tcp_summed": 0.096}


def test_load_breakdown_of_an_older_result_without_the_staged_load():
    breakdown, summary = bench_results.load_breakdown(results()["load"], 20000.0, 245_000_000, 2)
    assert set(breakdown) == {"cold", "warm"} and summary == {}
    assert breakdown["cold"]["other_ms"] == 2000.0 - 100.0  # nothing measured for the master or the caches


def test_each_load_is_set_beside_the_load_time_models_prediction():
    """bench.yml hands over rpc_master's prediction per state: each load gets measured / predicted."""
    figures = staged_results()
    figures["load"]["predicted_ms"] = {"cold": 1000.0, "staged": 600.0, "warm": 600.0}
    _breakdown, summary = bench_results.load_breakdown(figures["load"], 20000.0, 250_000_000, 2)
    # cold 2000 ms measured against 1000 predicted; staged 900 against 600; warm (results(): 500 ms) against 600
    assert {name: value for name, value in summary.items() if "predicted" in name} == {
        "cold_measured_over_predicted": 2.0, "staged_measured_over_predicted": 1.5, "warm_measured_over_predicted": 0.83}


def test_a_prediction_of_zero_gives_no_ratio():
    figures = staged_results()
    figures["load"]["predicted_ms"] = {"cold": 0.0, "staged": 600.0, "warm": 600.0}
    _breakdown, summary = bench_results.load_breakdown(figures["load"], 20000.0, 250_000_000, 2)
    assert "cold_measured_over_predicted" not in summary and "staged_measured_over_predicted" in summary
