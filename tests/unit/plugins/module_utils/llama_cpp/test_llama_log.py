"""module_utils/llama_cpp/llama_log.py: the figures read from llama.cpp's log lines, as llama-completion and llama-server print
them (b11312's formats)."""

from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import llama_log

LOG = """\
system_info: n_threads = 2 (n_threads_batch = 2) / 2 | CPU : NEON = 1 | ARM_FMA = 1 | SVE = 1 | SVE_CNT = 16 | REPACK = 1 |
load_tensors: RPC0[10.0.1.11:50052] model buffer size =   612.35 MiB
load_tensors: RPC0[10.0.1.12:50052] model buffer size =   600.00 MiB
load_tensors:   CPU_Mapped model buffer size =    70.31 MiB
llama_kv_cache: RPC0[10.0.1.11:50052] KV buffer size =    32.00 MiB
llama_kv_cache: RPC0[10.0.1.11:50052] KV buffer size =    32.00 MiB
llama_memory_recurrent: RPC0[10.0.1.12:50052] RS buffer size =     2.10 MiB
sched_reserve: RPC0[10.0.1.11:50052] compute buffer size =     1.64 MiB
sched_reserve:        CPU compute buffer size =   512 B
common_perf_print:        load time =      17.66 ms
common_perf_print: prompt eval time =       2.71 ms /     5 tokens (  0.54 ms per token,  1843.66 tokens per second)
common_perf_print:        eval time =      11.70 ms /     7 runs   (  1.67 ms per token,   598.34 tokens per second)
"""
MIB = 1 << 20


def test_the_timings_are_read_and_an_unmeasured_rate_is_none():
    assert llama_log.perf(LOG) == {"load_ms": 17.66, "prompt_ms": 2.71, "prompt_tokens": 5, "prompt_tps": 1843.66,
                                   "eval_ms": 11.70, "eval_runs": 7, "eval_tps": 598.34}
    one_token = LOG.replace("598.34 tokens per second", "inf tokens per second")
    assert llama_log.perf(one_token)["eval_tps"] is None


def test_buffers_per_device_add_up_by_kind_and_rpc_devices_go_by_endpoint():
    found = llama_log.buffers(LOG)
    assert found["10.0.1.11:50052"] == {"model": int(612.35 * MIB), "KV": 64 * MIB, "compute": int(1.64 * MIB)}
    assert found["10.0.1.12:50052"] == {"model": 600 * MIB, "RS": int(2.10 * MIB)}
    assert found["CPU_Mapped"] == {"model": int(70.31 * MIB)} and found["CPU"] == {"compute": 512}


def test_system_info_and_whether_the_log_is_whole():
    assert llama_log.system_info(LOG) == {"NEON": "1", "ARM_FMA": "1", "SVE": "1", "SVE_CNT": "16", "REPACK": "1"}
    assert llama_log.system_info_line("no such line\n") == ""
    assert llama_log.complete(LOG)
    # llama-completion sometimes exits 0 having lost its last lines: such a run is no result
    assert not llama_log.complete(LOG.rsplit("common_perf_print:        eval time", 1)[0])
