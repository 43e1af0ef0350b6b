"""llama_bench's own part: the llama-bench command it runs (the workers through --rpc with every layer offloaded, the
master alone with none), its refusals before running anything, and a program that does not print llama-bench's JSON
named. Real llama-bench runs are the bench role's (tests/integration/test_bench_alone.py)."""

import stat

import pytest
from ansible_collections.graviton.llama_rpc.plugins.modules import llama_bench

from tests.unit.plugins.module_runner import run_module


def test_check_mode_gives_the_command_through_the_workers_and_alone(capsys):
    through = run_module(llama_bench.main, capsys, binary="/opt/bin/llama-bench", model="/m.gguf", _ansible_check_mode=True,
                         workers=["10.0.0.2:50052", "10.0.0.3:50052"], n_prompt=[128, 512], n_gen=[32], repetitions=2, threads=4)
    assert through["skipped"] and through["command"] == [
        "/opt/bin/llama-bench", "-m", "/m.gguf", "-o", "json", "-r", "2", "-p", "128,512", "-n", "32",
        "--rpc", "10.0.0.2:50052,10.0.0.3:50052", "-ngl", "999", "-t", "4"]
    alone = run_module(llama_bench.main, capsys, binary="/opt/bin/llama-bench", model="/m.gguf", _ansible_check_mode=True)
    assert alone["command"][-2:] == ["-ngl", "0"] and "--rpc" not in alone["command"]
    tensor = run_module(llama_bench.main, capsys, binary="/opt/bin/llama-bench", model="/m.gguf", _ansible_check_mode=True,
                        workers=["10.0.0.2:50052", "10.0.0.3:50052"], split_mode="tensor")
    assert tensor["command"][-6:] == ["-ngl", "999", "-sm", "tensor", "-fa", "1"], tensor["command"]
    alone = run_module(llama_bench.main, capsys, binary="/opt/bin/llama-bench", model="/m.gguf", _ansible_check_mode=True,
                       split_mode="tensor")
    assert "-sm" not in alone["command"], "the master alone splits nothing"


@pytest.mark.parametrize("arguments, message", [
    ({"workers": ["10.0.0.%d:50052" % n for n in range(17)]}, "workers has 17 entries; llama.cpp uses at most 16"),
    ({"repetitions": 0}, "repetitions must be 1 or more, n_prompt and n_gen non-empty"),
    ({"n_gen": []}, "repetitions must be 1 or more, n_prompt and n_gen non-empty"),
])
def test_bad_arguments_are_refused_before_anything_runs(capsys, arguments, message):
    result = run_module(llama_bench.main, capsys, binary="/opt/bin/llama-bench", model="/m.gguf", **arguments)
    assert result["failed"] and message in result["msg"]


def test_a_missing_program_and_output_that_is_not_llama_benchs_are_named(capsys, tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    result = run_module(llama_bench.main, capsys, binary=str(tmp_path / "llama-bench"), model=str(model))
    assert result["failed"] and result["msg"] == "binary %s does not exist on this host" % (tmp_path / "llama-bench")
    impostor = tmp_path / "llama-bench"
    impostor.write_text("#!/bin/sh\necho 'this is not JSON'\n")
    impostor.chmod(impostor.stat().st_mode | stat.S_IXUSR)
    result = run_module(llama_bench.main, capsys, binary=str(impostor), model=str(model), timeout=30)
    assert result["failed"] and result["msg"].startswith("llama-bench output is not JSON (run it with -o json)")
    assert result["command"][0] == str(impostor)
