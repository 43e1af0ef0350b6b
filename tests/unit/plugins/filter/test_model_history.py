"""The model_history filter: the models a master keeps once it serves another, and the tensors their caches keep
(the decisions are model_releases', tests/unit/plugins/module_utils/model/test_model_releases.py)."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.graviton.llama_rpc.plugins.filter.model_history import model_history


def test_it_gives_the_history_and_the_caches_to_keep():
    history = [{"name": "tiny-bbbbbbbbbbbb", "cached_hashes": {"10.0.0.2:50052": ["b1"]}}]
    result = model_history(history, {"name": "tiny-cccccccccccc"}, "1")
    assert [item["name"] for item in result["history"]] == ["tiny-cccccccccccc", "tiny-bbbbbbbbbbbb"]
    assert result["cache_keep"] == {"10.0.0.2:50052": ["b1"]}


@pytest.mark.parametrize("history, entry, keep, message", [
    ({"name": "tiny-bbbbbbbbbbbb"}, {"name": "x"}, 1, "needs the models served"),
    ([], {}, 1, "needs the models served"),
    ([], {"name": "x"}, "one", "keep must be a whole number, got 'one'"),
])
def test_it_refuses_what_is_not_a_history(history, entry, keep, message):
    with pytest.raises(AnsibleFilterError, match=message):
        model_history(history, entry, keep)
