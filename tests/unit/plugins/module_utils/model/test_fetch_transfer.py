"""module_utils/model/fetch_transfer.py: failed attempts counted over a transfer's calls and refused past the bound,
with the fix named; the back-off cut short when the call must stop."""

import time

import pytest

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.model_download import Refused
from tests.unit.plugins.module_utils.model.fetch_parts import fetch

PART = {"path": "/var/lib/llama-models/.incoming/m/m.gguf", "number": 1, "name": "m.gguf"}


def test_attempts_in_a_row_are_refused_past_the_bound_with_the_fix(tmp_path):
    call = fetch(tmp_path, attempts=2)
    call.deadline = time.monotonic()  # the call's step is over: the back-off does not wait
    call.failed_attempt(dict(PART), "timed out")
    with pytest.raises(Refused, match=r"part 1 \(m.gguf\) could not be fetched after 2 attempts in a row \(refused\): "
                                      r"the master must reach the source"):
        call.failed_attempt(dict(PART), "refused")


def test_the_back_off_waits_within_the_step(tmp_path):
    call = fetch(tmp_path, attempts=5)
    call.deadline = time.monotonic() + 30
    began = time.monotonic()
    call.failed_attempt(dict(PART), "timed out")  # the first: 2 s
    assert 1.5 <= time.monotonic() - began < 5 and call.failures[PART["path"]] == 1
