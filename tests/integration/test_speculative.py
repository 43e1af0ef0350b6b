"""Speculative decoding's checks against llama.cpp itself (the role's build for this machine): the draft's vocabulary
rule says what llama-server does with the same pair (drafts with it, or drops it and serves without speculation), and
the plan counts the draft as llama.cpp's own projection of it; an n-gram kind writes through a worker the text written
without it. The text with a draft model through a deployed worker: test_rpc_master_alone.py; the refusals on a cluster
that speculates: molecule/cluster/tests/test_speculation.py."""

import json
import urllib.request

import pytest

from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import speculative
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import gguf
from ansible_collections.graviton.llama_rpc.plugins.module_utils.plan import llama_fit
from ansible_collections.graviton.llama_rpc.plugins.modules import gguf_plan
from tests.tools import llama_cpp, tiny_model
from tests.unit.plugins.module_runner import run_module

MIB = 1 << 20


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    work = tmp_path_factory.mktemp("speculative")
    return {
        "model": tiny_model.write_model(work / "model.gguf", embd=128, layers=4, ff=256),
        "same vocabulary": tiny_model.write_model(work / "draft.gguf", layers=1, seed=7),
        "38 tokens more": tiny_model.write_model(work / "vocab-300.gguf", layers=1, vocab=300),
        "138 tokens more": tiny_model.write_model(work / "vocab-400.gguf", layers=1, vocab=400),
    }


def llama_server_drafts_with(bin_dir, model, draft, log_path):
    """Whether llama-server takes draft for model (draft-simple), and its log. A draft it finds incompatible it drops,
    logging why, and serves on without speculation: a deploy that let it would not speculate and not say so."""
    with llama_cpp.llama_server(bin_dir, model, log_path, "--spec-type", "draft-simple", "-md", str(draft), timeout=60):
        pass
    text = open(log_path).read()
    assert "loading draft model" in text, text[-2000:]
    return "the target and draft vocabs are not compatible" not in text, text


@pytest.mark.parametrize("name", ["same vocabulary", "38 tokens more", "138 tokens more"])
def test_the_vocabulary_rule_is_llama_servers(x86_build, pairs, name, tmp_path):
    read = [gguf.read_header(pairs[key], whole_arrays=(speculative.TOKENS_KEY,))["metadata"] for key in ("model", name)]
    ours = speculative.vocab_problem(*read)
    takes, log = llama_server_drafts_with(x86_build, pairs["model"], pairs[name], tmp_path / "llama-server.log")
    assert (ours is None) == takes, (ours, log[-2000:])


@pytest.fixture(scope="module")
def worker(x86_build):
    """One RPC worker on loopback, for llama.cpp's projection of the model."""
    with llama_cpp.loopback_workers(x86_build, 1, threads=1) as endpoints:
        yield [{"endpoint": endpoints[0], "devices": [{"free": 8 << 30, "total": 8 << 30}]}]


def test_the_plan_counts_the_draft_as_llama_cpp_projects_it(x86_build, pairs, worker, capsys):
    """The draft's bytes on the master are llama.cpp's projection of it alone with the server's context and slots; they
    join the prompt cache in the master's need, and a master without room for them refuses the plan by name."""
    model, draft = pairs["model"], pairs["same vocabulary"]
    projection = {"program": str(x86_build / "llama-fit-params")}
    master = {"free": 8 << 30, "total": 8 << 30}
    theirs = llama_fit.project(llama_cpp.run_here, projection["program"], str(draft), [], 0, [], 1024 * 2, 2)["master"]
    planned = run_module(gguf_plan.main, capsys, path=str(model), workers=worker, context_size=1024, slots=2,
                         master_memory=master, master_reserved_bytes=64 * MIB, draft={"path": str(draft)},
                         projection=projection)
    assert not planned.get("failed"), planned
    assert planned["draft"]["bytes"] == sum(theirs.values()) and planned["draft"]["model"] == theirs["model"] > 0
    assert planned["plan"]["draft"] == planned["draft"]
    assert planned["plan"]["master"]["reserved_bytes"] == 64 * MIB + planned["draft"]["bytes"]

    # a master that holds the prompt cache but not the draft beside it (at 75% of its RAM)
    small = {"free": int((64 * MIB + planned["draft"]["bytes"]) / 0.75), "total": int((64 * MIB + planned["draft"]["bytes"]) / 0.75)}
    short = run_module(gguf_plan.main, capsys, path=str(model), workers=worker, context_size=1024, slots=2,
                       master_memory=small, master_reserved_bytes=64 * MIB, draft={"path": str(draft)}, projection=projection)
    assert short.get("failed") and "llama-server's prompt cache 64.0 MiB and the draft model" in short["msg"], short

    refused = run_module(gguf_plan.main, capsys, path=str(model), workers=worker, context_size=1024, slots=2,
                         master_memory=master, draft={"path": str(pairs["138 tokens more"])}, projection=projection)
    assert refused.get("failed") and "the draft model cannot draft for the model: their EOS tokens differ" in refused["msg"]


def greedy_through(bin_dir, model, endpoints, log_path, *speculation):
    """(text, drafted tokens) of 48 greedy tokens from llama-server over the workers, with the speculation options
    given (none: without speculation)."""
    with llama_cpp.llama_server(bin_dir, model, log_path, "--rpc", ",".join(endpoints), "-ngl", "999", "--metrics",
                                *speculation) as port:
        body = {"prompt": "Once upon a time", "n_predict": 48, "temperature": 0, "cache_prompt": False}
        request = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            text = json.loads(answer.read())["content"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            metrics = answer.read().decode()
    drafted = sum(float(line.split()[-1]) for line in metrics.splitlines()
                  if line.startswith("llamacpp:spec_decode_num_draft_tokens_total "))
    return text, drafted


def test_an_ngram_kind_writes_the_same_text_through_a_worker(x86_build, pairs, worker, tmp_path):
    """ngram-simple drafts from the text itself (no draft model): with greedy sampling, through the worker, the text is
    the one written without speculation, and tokens were drafted (a one-token lookup: the random model's text repeats).
    The same kind deployed passes the same settings as draft-simple (LLAMA_ARG_SPEC_TYPE), tested on a cluster."""
    endpoints = [found["endpoint"] for found in worker]
    plain, _none = greedy_through(x86_build, pairs["model"], endpoints, tmp_path / "plain.log")
    text, drafted = greedy_through(x86_build, pairs["model"], endpoints, tmp_path / "ngram.log",
                                   "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "1",
                                   "--spec-ngram-simple-size-m", "4")
    assert plain and text == plain, (plain, text)
    assert drafted > 0, open(tmp_path / "ngram.log").read()[-2000:]
