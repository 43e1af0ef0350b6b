"""llama_infer: its command line, its refusals, and the parser of llama.cpp's log (module_utils/llama_log) its figures
come from."""

from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import llama_log
from ansible_collections.graviton.llama_rpc.plugins.modules import llama_infer

from tests.unit.plugins.module_runner import run_module


LOG = """\
0.00.015.276 I load_tensors:   CPU_Mapped model buffer size =     0.06 MiB
0.00.015.278 I load_tensors: RPC0[10.0.1.11:50052] model buffer size =   612.35 MiB
0.00.015.279 I load_tensors: RPC0[10.0.1.12:50052] model buffer size =     1.50 GiB
0.00.019.691 I llama_kv_cache: RPC0[10.0.1.11:50052] KV buffer size =     0.12 MiB
0.00.023.059 I sched_reserve: RPC0[10.0.1.11:50052] compute buffer size =     1.64 MiB
0.00.044.771 I common_perf_print:        load time =      17.66 ms
0.00.044.773 I common_perf_print: prompt eval time =       2.71 ms /     5 tokens (    0.54 ms per token,  1843.66 tokens per second)
0.00.044.775 I common_perf_print:        eval time =      11.70 ms /     7 runs   (    1.67 ms per token,   598.34 tokens per second)
"""


def test_log_figures_and_buffers():
    assert llama_log.perf(LOG) == {"load_ms": 17.66, "prompt_ms": 2.71, "prompt_tokens": 5, "prompt_tps": 1843.66,
                                   "eval_ms": 11.70, "eval_runs": 7, "eval_tps": 598.34}
    buffers = llama_log.buffers(LOG)
    assert buffers["10.0.1.11:50052"] == {"model": int(612.35 * 2**20), "KV": int(0.12 * 2**20), "compute": int(1.64 * 2**20)}
    assert buffers["10.0.1.12:50052"] == {"model": int(1.5 * 2**30)}
    assert buffers["CPU_Mapped"]["model"] == int(0.06 * 2**20)


def test_an_unmeasurable_rate_is_none_not_a_lost_run():
    one_token = LOG.replace("11.70 ms /     7 runs   (    1.67 ms per token,   598.34 tokens per second)",
                            "0.00 ms /     1 runs   (    0.00 ms per token,      inf tokens per second)")
    assert llama_log.complete(one_token)
    assert llama_log.perf(one_token)["eval_tps"] is None and llama_log.perf(one_token)["eval_runs"] == 1


def test_a_run_that_lost_its_last_lines_is_not_complete():
    assert llama_log.complete(LOG)
    assert not llama_log.complete(LOG.rsplit("\n", 2)[0])


def test_infer_refuses_bad_input_before_running(tmp_path, capsys):
    binary = tmp_path / "llama-completion"
    binary.write_text("")
    result = run_module(llama_infer.main, capsys, binary=str(binary), model=str(tmp_path / "none.gguf"),
                        workers=["a:1"] * 17, prompt_file=str(tmp_path / "none.txt"), tensor_split=[1, 2])
    for fragment in ("workers has 17 entries", "model", "does not exist", "prompt_file", "tensor_split has 2 entries"):
        assert fragment in result["msg"]


def test_infer_command_line(tmp_path):
    params = dict(binary="/b/llama-completion", model="/m.gguf", workers=["a:1", "b:2"], prompt="Hi", prompt_file=None,
                  n_predict=8, seed=1, temperature=0.5, top_k=10, top_p=0.9, context_size=512, threads=None,
                  n_gpu_layers=999, tensor_split=[3, 1], fit=False, extra_args=[], split_mode="layer")
    command = llama_infer.command_line(params)
    assert command[:8] == ["/b/llama-completion", "-m", "/m.gguf", "--rpc", "a:1,b:2", "-ngl", "999", "-fit"]
    assert command[8] == "off" and command[-2:] == ["-ts", "3,1"] and "--no-display-prompt" in command
    assert "-sm" not in command
    tensor = llama_infer.command_line(dict(params, tensor_split=None, split_mode="tensor"))
    assert tensor[-4:] == ["-sm", "tensor", "-fa", "on"], tensor
