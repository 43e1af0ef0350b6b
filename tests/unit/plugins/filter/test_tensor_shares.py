"""The tensor_shares filter: which hashed tensors each worker receives under a plan (llama.cpp's own placement)."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.graviton.llama_rpc.plugins.filter.tensor_shares import tensor_shares

PLAN = {"workers": [{"name": "10.0.2.11:50052", "layers": [0, 1], "output": False},
                    {"name": "10.0.2.12:50052", "layers": [2, 3], "output": True}],
        "master": {"layers": [], "output": False}}


def tensor(name, layer):
    return {"name": name, "layer": layer, "hash": name, "size": 1}


def test_each_layer_goes_to_the_worker_whose_range_holds_it_and_the_output_to_its_holder():
    tensors = [tensor("blk.%d.ffn_up.weight" % layer, layer) for layer in range(4)] + [tensor("output.weight", None)]
    shares = tensor_shares(tensors, PLAN)
    assert [t["name"] for t in shares["10.0.2.11:50052"]] == ["blk.0.ffn_up.weight", "blk.1.ffn_up.weight"]
    assert [t["name"] for t in shares["10.0.2.12:50052"]] == ["blk.2.ffn_up.weight", "blk.3.ffn_up.weight", "output.weight"]


def test_a_plan_made_for_another_model_is_named():
    with pytest.raises(AnsibleFilterError, match="the plan places layers 0 to 3, and the model has blk.7.ffn_up.weight"):
        tensor_shares([tensor("blk.7.ffn_up.weight", 7)], PLAN)


def test_it_refuses_what_is_not_a_plan():
    with pytest.raises(AnsibleFilterError, match="needs a gguf_plan plan"):
        tensor_shares([], {"master": {}})
