"""The input rules of bench (module_utils/input_rules/bench.py), case by case: each bad setting is refused with a
sentence that names it and the fix, only the wrong ones are named, and the role's own defaults pass."""

import pytest
from tests.unit.plugins.module_utils.input_rules.rules import refusals, check

BENCH_CASES = {
    "no prompt sizes": ({"bench_n_prompt": []}, ["bench_n_prompt=[]: list prompt sizes of 0 or more."]),
    "negative generation size": ({"bench_n_gen": [8, -1]}, ["bench_n_gen=[8, -1]: list generation sizes of 0 or more."]),
    "no repetition": ({"bench_repetitions": 0}, ["bench_repetitions=0: set it to 1 or more."]),
    "no TCP bytes": ({"bench_tcp_megabytes": 0}, ["bench_tcp_megabytes=0: set it to 1 or more."]),
    "zero workers": ({"bench_worker_counts": [0, 1]}, ["bench_worker_counts=[0, 1]: list counts of 1 or more"]),
    "more workers than the cluster has": ({"bench_worker_counts": [1, "3"]},
                                          ["bench_worker_counts=[1, '3'] asks for more workers than the cluster has (2): "
                                           "list counts from 1 to 2, or none (1 to all)."]),
    "concurrency of 0 and no tokens": ({"bench_concurrency": [0, 2], "bench_concurrency_tokens": 0},
                                       ["bench_concurrency=[0, 2]: list numbers of clients of 1 or more, or none (no measurement). "
                                        "bench_concurrency_tokens=0: set it to 1 or more."]),
    "no request per client": ({"bench_concurrency_requests": 0}, ["bench_concurrency_requests=0: set it to 1 or more."]),
    "comparison with a missing file": ({"bench_compare_with": "/nonexistent/first.json"},
                                       ["bench_compare_with='/nonexistent/first.json': give an existing result file"]),
}


BENCH = {"worker_total": 2}


def test_bench_defaults_pass(tmp_path):
    assert refusals("bench", BENCH, {}) == []
    first = tmp_path / "first.json"
    first.write_text("{}")
    assert refusals("bench", BENCH, {"bench_compare_with": str(first), "bench_worker_counts": [1, "2"], "bench_concurrency": []}) == []


def test_bench_worker_counts_are_checked_against_the_cluster_only_once_it_is_deployed():
    # No published workers: the role's next check says to deploy first; the counts' own rule still holds.
    assert refusals("bench", {"worker_total": None}, {"bench_worker_counts": [5]}) == []
    assert refusals("bench", {"worker_total": None}, {"bench_worker_counts": [0]}) == [
        "bench_worker_counts=[0]: list counts of 1 or more, or none (1 to all)."]
    assert refusals("bench", {"worker_total": 5}, {"bench_worker_counts": [5, 1]}) == []


@pytest.mark.parametrize("case", sorted(BENCH_CASES))
def test_bench_bad_input_names_only_the_wrong_settings(case):
    overrides, messages = BENCH_CASES[case]
    found = check("bench", BENCH, overrides, messages)
    assert len(found) == sum(message.count("=") for message in messages), "%s: a good setting was named: %s" % (case, found)
