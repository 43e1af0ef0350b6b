"""The bench role alone, for a change to it (`make role ROLE=bench`, minutes warm): playbooks/bench.yml on the smallest
cluster (conftest.py, small_cluster), twice at small sizes: the first measures everything (tokens/s on the master alone
and over the worker, the loads cold, staged and warm beside the load-time model's predictions, the network, clients at
once on llama-server), the second compares itself with the first. This proves the plumbing; make bench and make
bench-first-load measure. The cluster scenario runs it on two workers, one without a package mirror."""

import json

import pytest

from tests.integration.bad_input import assert_refused
from tests.integration.conftest import ROOT
from tests.tools import containers

QUICK = {"bench_n_prompt": [16], "bench_n_gen": [8], "bench_repetitions": 1, "bench_tcp_megabytes": 32,
         "bench_concurrency": [1, 2], "bench_concurrency_requests": 1, "bench_concurrency_tokens": 8}


@pytest.fixture(scope="module")
def benched(small_cluster, tmp_path_factory):
    """Both runs' outputs and results: (first stdout, second stdout, first result, second result, results directory)."""
    inventory = small_cluster[1] / "hosts.yml"
    results = tmp_path_factory.mktemp("bench")
    first = containers.run_playbook(inventory, ROOT / "playbooks" / "bench.yml",
                                    dict(QUICK, bench_results_dir=str(results), bench_name="first"), timeout=1200)
    assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
    second = containers.run_playbook(inventory, ROOT / "playbooks" / "bench.yml",
                                     dict(QUICK, bench_results_dir=str(results), bench_name="second", bench_load=False,
                                          bench_network=False, bench_concurrency=[],
                                          bench_compare_with=str(results / "first.json")), timeout=1200)
    assert second.returncode == 0, (second.stdout + second.stderr)[-4000:]
    measured, compared = (json.loads((results / f"{name}.json").read_text()) for name in ("first", "second"))
    return first.stdout, second.stdout, measured, compared, results


def test_tokens_per_second_on_the_master_alone_and_over_the_worker(benched):
    _first, _second, measured, _compared, _results = benched
    assert sorted({run["workers"] for run in measured["runs"]}) == [0, 1], measured["runs"]
    assert all(run["tokens_per_second"] > 0 for run in measured["runs"]), measured["runs"]


def test_the_loads_beside_the_load_time_models_predictions(benched):
    first, _second, measured, _compared, results = benched
    load = measured["load"]
    assert set(load["breakdown"]) == {"cold", "staged", "warm"} and load["master_read_hash_ms"] > 0, load
    # the staged load finds the worker's cache filled by rpc_master's staging: hashes go, no weights
    assert load["staged_bytes_sent"] <= 0.05 * measured["model"]["file_size"], load
    assert load["staged_cache_bytes_written"] == 0 and load["cold_cache_bytes_written"] >= load["staging_bytes"] > 0, load
    for state in ("cold", "staged", "warm"):
        assert load["predicted_ms"][state] > 0, load
        assert load["summary"][f"{state}_measured_over_predicted"] == round(load[f"{state}_ms"] / load["predicted_ms"][state], 2)
    assert "cold: measured " in first and "measured / predicted" in first
    assert load["cold_bytes_sent"] > 0 and "| staged |" in (results / "first.md").read_text(), load


def test_the_network_and_clients_at_once(benched):
    _first, _second, measured, _compared, results = benched
    assert measured["network"]["raw_tcp_mbit_per_s"] > 0 and measured["network"]["tool"].startswith("iperf 3"), measured["network"]
    concurrency = measured["concurrency"]
    # the plan's slots (conftest.py asks for 2), each client streaming 8 tokens (the server's own count)
    assert concurrency["slots"] == 2 and [level["clients"] for level in concurrency["levels"]] == [1, 2], concurrency
    for level in concurrency["levels"]:
        assert level["failed"] == 0 and level["completion_tokens"] == 8 * level["clients"], level
        assert 0 < level["ttft_ms_p95"] <= level["latency_ms_p95"] and level["tokens_per_second"] > 0, level
    assert "| 2 | 2 | 0 |" in (results / "first.md").read_text()


def test_the_second_run_compares_itself_with_the_first(benched):
    _first, second, _measured, compared, results = benched
    assert not compared["load"] and not compared["concurrency"], compared
    assert (results / "second.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| Test | master alone | 1 worker |" in (results / "second.md").read_text()
    assert "tg8, 1 worker tokens/s" in second and " x" in second, second[-3000:]


def test_more_workers_than_the_deployed_cluster_has_are_refused_before_anything_is_measured(small_cluster, tmp_path):
    # The count rpc_master published on the master (1 worker) reaches bench's input rule (unit-tested case by case).
    result = containers.run_playbook(small_cluster[1] / "hosts.yml", ROOT / "playbooks" / "bench.yml",
                                     dict(QUICK, bench_results_dir=str(tmp_path), bench_worker_counts=[1, 2]))
    assert_refused("two workers of one", result,
                   ["bench_worker_counts=[1, 2] asks for more workers than the cluster has (1): list counts from 1 to 1"],
                   untouched=not list(tmp_path.iterdir()))
