"""The input rules of rpc_master (module_utils/input_rules/rpc_master.py), case by case: each bad setting is refused with a
sentence that names it and the fix, only the wrong ones are named, and the role's own defaults pass.
The model's source, parts and checksums are model_source's (model/test_model_source.py)."""

import pytest
from tests.unit.plugins.module_utils.input_rules.rules import refusals, check

MASTER = {"host": "master", "masters": ["master"], "workers": ["w1", "w2"], "max_workers": 16, "server_address": "10.0.0.2",
          "host_addresses": ["10.0.0.2", "fd00::2"], "host_ipv4": ["10.0.0.2"], "api_key_given": True}

MASTER_CASES = {
    "two masters": ({"masters": ["master", "other-master-1"]},
                    ["The cluster needs exactly one master: group 'llama_master' holds master, other-master-1 and this "
                     "play runs the role on master"]),
    "the master not in its group": ({"masters": []}, ["group 'llama_master' holds no hosts and this play runs the role on master"]),
    "no workers": ({"workers": []}, ["holds 0 hosts; a llama.cpp master uses 1 to 16 RPC workers"]),
    "more than 16 workers": ({"workers": ["w%d" % index for index in range(17)]},
                             ["holds 17 hosts; a llama.cpp master uses 1 to 16"]),
    "tensor mode over one worker": ({"rpc_master_split_mode": "tensor", "workers": ["w1"]},
                                    ["rpc_master_split_mode=tensor splits each layer across the workers, and this cluster "
                                     "has 1: with one worker there is nothing to share. Set rpc_master_split_mode: layer"]),
    "the master's share in layer mode": ({"rpc_master_tensor_on_master": True},
                                         ["rpc_master_tensor_on_master is true, but rpc_master_split_mode is layer: the "
                                          "master's CPU holds a share of every layer in tensor mode only"]),
    "the master's share on the tunnel": ({"rpc_master_split_mode": "tensor", "rpc_master_tensor_on_master": True,
                                          "tunnelled": True},
                                         ["rpc_master_tensor_on_master is true on master, which reaches its workers over "
                                          "the WireGuard tunnel (rpc_tunnel_enabled)"]),
    "the master's share beside the most workers llama.cpp takes": (
        {"rpc_master_split_mode": "tensor", "rpc_master_tensor_on_master": True, "workers": ["w%d" % n for n in range(16)]},
        ["rpc_master_tensor_on_master would make the master's own RPC server the 17th, and llama.cpp uses at most 16"]),
    "a split mode llama.cpp has but the collection does not plan": (
        {"rpc_master_split_mode": "row"}, ["rpc_master_split_mode=row: set it to layer (whole layers per node"]),
    "two sizes out of range, in the order of the role's variables": (
        {"rpc_master_server_parallel": 0, "rpc_master_server_port": 70000},
        ["Out of range: rpc_master_server_port=70000: set it from 1 to 65535. rpc_master_server_parallel=0: set it "
         "to 1 or more (slots)."]),
    "memory fraction above 1": ({"rpc_master_memory_fraction": 1.5},
                                ["Out of range: rpc_master_memory_fraction=1.5: set it above 0 and at most 1."]),
    "memory fraction that is not a number": ({"rpc_master_memory_fraction": "most"},
                                             ["rpc_master_memory_fraction=most: set it above 0 and at most 1."]),
    "a negative context and a probe timeout of 0": (
        {"rpc_master_context_size": -1, "rpc_master_probe_timeout": 0},
        ["Out of range: rpc_master_context_size=-1: set it to 0 (the model's) or more. rpc_master_probe_timeout=0: set it "
         "above 0 (seconds)."]),
    "threads of 0": ({"rpc_master_threads": 0}, ["rpc_master_threads=0: set it to 1 or more, or null"]),
    "negative load threads": ({"rpc_master_load_threads": -1}, ["rpc_master_load_threads=-1: set it from 0 (every CPU"]),
    "load threads not a number": ({"rpc_master_load_threads": "many"}, ["rpc_master_load_threads=many: set it from 0"]),
    "download bounds of 0": ({"rpc_master_model_download_timeout": 0, "rpc_master_model_read_timeout": 0,
                              "rpc_master_model_download_attempts": 0, "rpc_master_model_download_parallel": 0},
                             ["rpc_master_model_download_timeout=0: set it to 1 second or more. rpc_master_model_read_timeout=0: "
                              "set it to 1 second or more. rpc_master_model_download_attempts=0: set it to 1 or more. "
                              "rpc_master_model_download_parallel=0: set it to 1 or more (parts at once)."]),
    "connections per part of 0": (
        {"rpc_master_model_download_connections": 0},
        ["rpc_master_model_download_connections=0: set it from 1 (one stream per part) to 64 (connections per part)."]),
    "connections per part of 10,000": (
        {"rpc_master_model_download_connections": 10000},
        ["rpc_master_model_download_connections=10000: set it from 1 (one stream per part) to 64"]),
    "a negative count of kept models": ({"rpc_master_models_kept": -1},
                                        ["Out of range: rpc_master_models_kept=-1: set it to 0 (only the served model) or "
                                         "more (models kept for a rollback)."]),
    "an unbounded prompt cache": ({"rpc_master_server_cache_ram_mib": -1},
                                  ["rpc_master_server_cache_ram_mib=-1: set it to 0 (no prompt cache) or more MiB; an "
                                   "unbounded cache (-1) cannot be planned."]),
    "a negative drain": ({"rpc_master_server_drain_seconds": -1},
                         ["Out of range: rpc_master_server_drain_seconds=-1: set it to 0 (stop at once) or more seconds "
                          "(the requests in flight end first)."]),
    "watchdog interval of 0": ({"rpc_master_watchdog_interval": 0}, ["rpc_master_watchdog_interval=0: set it to 1 second or more."]),
    "a negative idle stop": ({"rpc_master_idle_stop_minutes": -5},
                             ["rpc_master_idle_stop_minutes=-5: set it to 0 (never) or more minutes."]),
    "an idle stop that is no number": ({"rpc_master_idle_stop_minutes": "half an hour"},
                                       ["rpc_master_idle_stop_minutes=half an hour: set it to 0 (never) or more minutes."]),
    "an idle stop shorter than two checks": ({"rpc_master_idle_stop_minutes": 0.1},
                                             ["rpc_master_idle_stop_minutes=0.1 is shorter than two of the watchdog's "
                                              "checks (rpc_master_watchdog_interval=5 s): set it to 0.17 or more."]),
    "an idle stop without the server's figures": ({"rpc_master_idle_stop_minutes": 30, "rpc_master_server_metrics": False,
                                                   "rpc_master_watchdog_enabled": False},
                                                  ["The idle stop reads llama-server's /metrics: set "
                                                   "rpc_master_server_enabled and rpc_master_server_metrics to true"]),
    "an idle stop on AWS with no region": ({"rpc_master_idle_stop_minutes": 30, "idle_stop_driver": "aws",
                                            "idle_stop_region": ""},
                                           ["The idle stop of an AWS master needs its region", "placement.region"]),
    "an idle stop with checks every 0 s": ({"rpc_master_idle_stop_minutes": 30, "rpc_master_watchdog_enabled": False,
                                            "rpc_master_watchdog_interval": 0},
                                           ["rpc_master_watchdog_interval=0: set it to 1 second or more (the idle stop's "
                                            "checks)."]),
    "a wake port out of range": ({"rpc_master_wake_port": 70000},
                                 ["rpc_master_wake_port=70000: set it from 1 to 65535 (the wake socket), or 0 (none)."]),
    "a wake port that is llama-server's": ({"rpc_master_wake_port": 8080},
                                           ["rpc_master_wake_port=8080 is llama-server's own port (rpc_master_server_port)"]),
    "a wake port without the server": ({"rpc_master_wake_port": 8091, "rpc_master_server_enabled": False,
                                        "api_key_given": False},
                                       ["rpc_master_wake_port=8091 starts llama-server, which rpc_master_server_enabled: "
                                        "false leaves out"]),
    "watchdog without metrics": ({"rpc_master_server_metrics": False},
                                 ["The watchdog asks llama-server's /metrics", "set rpc_master_server_metrics: true"]),
    "empty API key with the server enabled": ({"api_key_given": False},
                                              ["llama-server needs rpc_master_server_api_key", "Ansible Vault",
                                               "Or set rpc_master_server_enabled: false."]),
    "server on every interface": ({"server_address": "0.0.0.0"}, ["never 0.0.0.0", "set rpc_master_server_bind_address"]),
    "server on an address of another host": ({"server_address": "10.0.0.77"},
                                             ["llama-server binds to an address of this host (10.0.0.2, fd00::2 or 127.0.0.1; "
                                              "got '10.0.0.77', never 0.0.0.0)"]),
    "server address that is a host name": ({"server_address": "master.internal"},
                                           ["rpc_master_server_bind_address='master.internal' is not an IP address"]),
    "no address for the server": ({"server_address": ""},
                                  ["master has no default route to take its private address from: set it to one of "
                                   "10.0.0.2, or 127.0.0.1"]),
    "missing prompt file": ({"rpc_master_infer": True, "rpc_master_infer_prompt_file": "/nonexistent/prompt.txt"},
                            ["One-shot inference: rpc_master_infer_prompt_file: /nonexistent/prompt.txt does not exist"]),
    "a prompt and a prompt file": ({"rpc_master_infer": True, "rpc_master_infer_prompt": "Hi",
                                    "rpc_master_infer_prompt_file": "/etc/hostname"},
                                   ["One-shot inference: set exactly one of rpc_master_infer_prompt and "
                                    "rpc_master_infer_prompt_file"]),
    "an unknown kind of speculative decoding": ({"rpc_master_spec_type": "draft-magic"},
                                                ["rpc_master_spec_type=draft-magic is no kind of speculative decoding "
                                                 "llama.cpp has: set it to none (off)", "draft-simple", "ngram-mod"]),
    "a draft kind without a draft model": ({"rpc_master_spec_type": "draft-simple"},
                                           ["rpc_master_spec_type=draft-simple drafts with a model of its own: set "
                                            "rpc_master_spec_draft_src"]),
    "a draft model beside an n-gram kind": ({"rpc_master_spec_type": "ngram-mod", "rpc_master_spec_draft_src": "/m/d.gguf"},
                                            ["rpc_master_spec_draft_src is set, and rpc_master_spec_type=ngram-mod drafts "
                                             "without a model"]),
    "a draft URL without checksums": ({"rpc_master_spec_type": "draft-simple",
                                       "rpc_master_spec_draft_src": "https://example.com/d.gguf"},
                                      ["rpc_master_spec_draft_sha256 (one per part) or rpc_master_spec_draft_sha256sums is "
                                       "required for a download"]),
    "a draft source that is no source": ({"rpc_master_spec_type": "draft-simple", "rpc_master_spec_draft_src": "d.gguf"},
                                         ["rpc_master_spec_draft_src=d.gguf is not a model source"]),
    "a draft from S3": ({"rpc_master_spec_type": "draft-simple", "rpc_master_spec_draft_src": "s3://bucket/d.gguf",
                         "rpc_master_spec_draft_sha256": "a" * 64},
                        ["rpc_master_spec_draft_src: a draft is fetched from a path on the master or an http(s) URL, "
                         "not from S3"]),
    "speculation without the server": ({"rpc_master_spec_type": "ngram-simple", "rpc_master_server_enabled": False,
                                        "api_key_given": False},
                                       ["rpc_master_spec_type=ngram-simple speeds up llama-server, which "
                                        "rpc_master_server_enabled: false leaves out"]),
    "a draft length of 0": ({"rpc_master_spec_type": "ngram-simple", "rpc_master_spec_draft_max": 0},
                            ["rpc_master_spec_draft_max=0: set it from 1 to 4095 (tokens drafted per step"]),
    "a draft length of the whole context": ({"rpc_master_spec_type": "ngram-simple", "rpc_master_spec_draft_max": 4096},
                                            ["rpc_master_spec_draft_max=4096: set it from 1 to 4095"]),
    "a shortest draft above the longest": ({"rpc_master_spec_type": "ngram-simple", "rpc_master_spec_draft_min": 5},
                                           ["rpc_master_spec_draft_min=5: set it from 0 to rpc_master_spec_draft_max (3)."]),
    "infer tokens of 0": ({"rpc_master_infer": True, "rpc_master_infer_prompt": "Hi", "rpc_master_infer_tokens": 0},
                          ["One-shot inference: rpc_master_infer_tokens=0: set it to 1 or more."]),
}


def test_rpc_master_defaults_pass():
    assert refusals("rpc_master", MASTER, {}) == []
    assert refusals("rpc_master", MASTER, {"server_address": "127.0.0.1", "rpc_master_threads": "8",
                                           "rpc_master_memory_fraction": "1", "rpc_master_context_size": 0}) == []
    assert refusals("rpc_master", MASTER, {"rpc_master_infer": True, "rpc_master_infer_prompt_file": "/etc/hostname"}) == []
    assert refusals("rpc_master", MASTER, {"rpc_master_idle_stop_minutes": "0.25", "idle_stop_driver": "aws",
                                           "idle_stop_region": "eu-west-1"}) == []
    assert refusals("rpc_master", MASTER, {"rpc_master_split_mode": "tensor"}) == []
    # one worker and the master's own share: two devices to split each layer over
    assert refusals("rpc_master", MASTER, {"rpc_master_split_mode": "tensor", "rpc_master_tensor_on_master": True,
                                           "workers": ["w1"]}) == []
    assert refusals("rpc_master", MASTER, {"rpc_master_spec_type": "draft-simple",
                                           "rpc_master_spec_draft_src": "https://example.com/d-00001-of-00002.gguf",
                                           "rpc_master_spec_draft_sha256sums": "https://example.com/SHA256SUMS",
                                           "rpc_master_spec_draft_max": 16, "rpc_master_spec_draft_min": 2}) == []
    assert refusals("rpc_master", MASTER, {"rpc_master_spec_type": "ngram-mod", "rpc_master_context_size": 0,
                                           "rpc_master_spec_draft_max": 64}) == []
    # without llama-server, its settings are not asked for (the one-shot inference stands alone)
    assert refusals("rpc_master", MASTER, {"rpc_master_server_enabled": False, "api_key_given": False,
                                           "server_address": "0.0.0.0", "rpc_master_watchdog_interval": 0}) == []


@pytest.mark.parametrize("case", sorted(MASTER_CASES))
def test_rpc_master_bad_input_names_only_what_is_wrong(case):
    overrides, messages = MASTER_CASES[case]
    assert len(check("rpc_master", MASTER, overrides, messages)) == 1
