"""Bad input to bench fails with a message that names only the wrong settings, each with its fix, before it
measures or writes anything; a master without a deployed cluster is told to deploy first. Real ansible-playbook
runs against a real systemd container."""

from pathlib import Path

import pytest

from tests.integration.bad_input import assert_refused
from tests.tools import containers

PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "bench.yml"
HOST = NETWORK = "llama-rpc-bench-badinput"


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    with containers.throwaway_host(HOST, NETWORK, tmp_path_factory.mktemp("inventory")) as started:
        yield started


def bench(host, results, **overrides):
    result = containers.run_playbook(host[1], PLAYBOOK, dict({"bench_results_dir": str(results)}, **overrides))
    return result, result.stdout + result.stderr  # ansible-core 2.19+ prints a task's failure on stderr too


# Every input rule, case by case, is a unit test (tests/unit/plugins/module_utils/input_rules/); these prove
# end to end that the role asks the rules and measures and writes nothing.
CASES = {
    "concurrency of 0 and no tokens": ({"bench_concurrency": [0, 2], "bench_concurrency_tokens": 0},
                                       ["bench_concurrency=[0, 2]: list numbers of clients of 1 or more, or none (no measurement). "
                                        "bench_concurrency_tokens=0: set it to 1 or more."]),
    "comparison with a missing file": ({"bench_compare_with": "/nonexistent/first.json"},
                                       ["bench_compare_with='/nonexistent/first.json': give an existing result file"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_refused_by_name(host, tmp_path, case):
    overrides, messages = CASES[case]
    result, output = bench(host, tmp_path, **overrides)
    assert_refused(case, result, messages, untouched=not list(tmp_path.iterdir()))
    named = [setting for setting in ("bench_n_prompt=", "bench_n_gen=", "bench_repetitions=", "bench_tcp_megabytes=",
                                     "bench_worker_counts=", "bench_concurrency=", "bench_concurrency_requests=",
                                     "bench_concurrency_tokens=", "bench_compare_with=") if setting in output]
    assert len(named) == sum(message.count("=") for message in messages), f"{case}: a good setting was named: {named}"


def test_a_master_without_a_cluster_is_told_to_deploy_first(host, tmp_path):
    result, _output = bench(host, tmp_path)
    assert_refused("no cluster", result, ["has no deployment of rpc_master (local fact llama_rpc_master) and no llama.cpp build",
                                          "deploy the cluster first (playbooks/deploy.yml)"], not list(tmp_path.iterdir()))
