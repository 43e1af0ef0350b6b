"""Tensor mode's rules (module_utils/plan/tensor_split.py): the architectures llama.cpp refuses, read from the pinned
source itself, and the worker counts the collection refuses."""

import re

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.plan import tensor_split
from tests.tools.llama_cpp import pinned_source_file


def test_the_excluded_architectures_are_llama_cpps_own():
    source = pinned_source_file("src/llama-arch.cpp")
    names = dict(re.findall(r"\{\s*(LLM_ARCH_[A-Z0-9_]+),\s*\"([^\"]+)\"\s*\}", source))
    body = source.split("bool llm_arch_supports_sm_tensor(const llm_arch & arch) {", 1)[1].split("return false;", 1)[0]
    excluded = {names[arch] for arch in re.findall(r"case (LLM_ARCH_[A-Z0-9_]+):", body)}
    assert len(excluded) > 20 and excluded == set(tensor_split.EXCLUDED)
    assert "llama" not in excluded and "qwen3moe" not in excluded


@pytest.mark.parametrize("architecture, kv_heads, workers, refused", [
    ("llama", 8, 2, []),
    ("llama", 8, 8, []),
    ("llama", 2, 3, ["has 2 KV heads and llama.cpp splits attention in whole KV heads, so 1 of the 3 workers would get none",
                     "Use at most 2 workers"]),
    ("llama", 8, 1, ["with one worker there is nothing to share"]),
    ("mamba", None, 2, ["does not split architecture 'mamba' (the model) by tensors (llm_arch_supports_sm_tensor)"]),
    ("qwen3next", None, 4, []),
])
def test_tensor_mode_refuses_what_llama_cpp_would_not_split_or_would_split_badly(architecture, kv_heads, workers, refused):
    found = tensor_split.problems(architecture, kv_heads, workers)
    assert bool(found) == bool(refused), found
    for message in refused:
        assert message in " ".join(found), found
    assert all(sentence.startswith("rpc_master_split_mode=tensor") and "rpc_master_split_mode: layer" in sentence
               for sentence in found)
