"""The worker list and split_endpoint filters, and the parser of llama.cpp's log that llama_infer's figures come from."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.graviton.llama_rpc.plugins.filter.split_endpoint import split_endpoint
from ansible_collections.graviton.llama_rpc.plugins.filter.worker_list import worker_list
from ansible_collections.graviton.llama_rpc.plugins.module_utils import llama_log
from ansible_collections.graviton.llama_rpc.plugins.modules import llama_infer

from tests.unit.plugins.module_runner import run_module


def published(*endpoints):
    """A worker's facts once the rpc_worker role published its instances (local fact llama_rpc_worker)."""
    instances = [{"name": f"i{index}", "endpoint": endpoint, "cache_dir": ""} for index, endpoint in enumerate(endpoints)]
    return {"ansible_facts": {"ansible_local": {"llama_rpc_worker": {"instances": instances}}}}


HOSTVARS = {
    "w1": published("10.0.1.11:50052"),
    "w2": published("10.0.1.12:50060"),
    # this run's fact comes first: the local fact may be the previous run's
    "w3": dict(published("10.0.1.99:50052"), rpc_worker_endpoints=["10.0.1.13:50052", "10.0.1.13:50053"]),
    "w4": published("[fd00::4]:50052", "[fd00::4]:50053"),
}


def test_worker_list_from_this_runs_and_published_endpoints():
    assert worker_list(["w1", "w2", "w3", "w4"], HOSTVARS) == [
        "10.0.1.11:50052", "10.0.1.12:50060", "10.0.1.13:50052", "10.0.1.13:50053", "[fd00::4]:50052", "[fd00::4]:50053"]


def test_worker_list_is_deduplicated_in_a_stable_order():
    assert worker_list(["w2", "w1", "w2", "w1"], HOSTVARS) == ["10.0.1.12:50060", "10.0.1.11:50052"]


@pytest.mark.parametrize("hosts, message", [
    ([], "no RPC workers"),
    ([f"h{index}" for index in range(17)], "17 RPC workers; llama.cpp uses at most 16"),
    (["nowhere"], "nowhere is not in the inventory"),
    ("w1", "expects a list"),
    # its address and port are worked out by the rpc_worker role only, never guessed from the inventory
    (["unpublished"], "unpublished has published no RPC worker endpoints .* Run the rpc_worker role on it"),
    # parsed, not trusted: an endpoint must be an IP address the master can dial
    (["named"], "named published the endpoint 'worker-1.internal:50052', which is not address:port"),
    (["every"], "every published '0.0.0.0:50052': the master cannot dial an every-interface address"),
    (["octets"], "octets published the endpoint '10.0.1.300:50052'"),
])
def test_worker_list_refuses_bad_clusters(hosts, message):
    hostvars = dict(HOSTVARS, unpublished={"ansible_host": "10.0.4.1", "rpc_worker_port": 50052},
                    named=published("worker-1.internal:50052"), every=published("0.0.0.0:50052"),
                    octets=published("10.0.1.300:50052"),
                    **{f"h{index}": published(f"10.0.3.{index}:50052") for index in range(17)})
    with pytest.raises(AnsibleFilterError, match=message):
        worker_list(hosts, hostvars)


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
                  n_gpu_layers=999, tensor_split=[3, 1], fit=False, extra_args=[])
    command = llama_infer.command_line(params)
    assert command[:8] == ["/b/llama-completion", "-m", "/m.gguf", "--rpc", "a:1,b:2", "-ngl", "999", "-fit"]
    assert command[8] == "off" and command[-2:] == ["-ts", "3,1"] and "--no-display-prompt" in command


@pytest.mark.parametrize("endpoint, parts", [
    ("10.0.1.11:50052", {"host": "10.0.1.11", "port": 50052}),
    ("[fd00::11]:50099", {"host": "fd00::11", "port": 50099}),
])
def test_split_endpoint(endpoint, parts):
    assert split_endpoint(endpoint) == parts


@pytest.mark.parametrize("endpoint, message", [
    ("10.0.1.11", "is not host:port"),
    ("10.0.1.11:0", "the port must be a number from 1 to 65535"),
    (None, "expects an endpoint"),
])
def test_split_endpoint_refuses_what_is_no_endpoint(endpoint, message):
    with pytest.raises(AnsibleFilterError, match=message):
        split_endpoint(endpoint)
