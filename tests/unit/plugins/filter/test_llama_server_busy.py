"""The llama_server_busy filter: the requests in flight, from llama-server's /metrics text."""

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.graviton.llama_rpc.plugins.filter.llama_server_busy import llama_server_busy

DATA = Path(__file__).resolve().parents[2] / "data" / "daemons"


def test_a_busy_server_and_an_idle_one():
    assert llama_server_busy((DATA / "metrics-busy-2.txt").read_text()) == 1
    assert llama_server_busy((DATA / "metrics-idle.txt").read_text()) == 0


@pytest.mark.parametrize("given, message", [(None, "expects the text"), ("llamacpp:requests_processing x\n", "is no sample")])
def test_what_is_not_metrics_is_refused(given, message):
    with pytest.raises(AnsibleFilterError, match=message):
        llama_server_busy(given)
