"""llama-server's /metrics, parsed: recorded from a live llama-server (tests/unit/data/daemons/)."""

from pathlib import Path

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import server_metrics

DATA = Path(__file__).resolve().parents[3] / "data" / "daemons"


@pytest.mark.parametrize("recording, in_flight", [("metrics-idle.txt", 0), ("metrics-busy-1.txt", 1), ("metrics-busy-2.txt", 1)])
def test_the_requests_in_flight_of_a_live_server(recording, in_flight):
    text = (DATA / recording).read_text()
    figures = server_metrics.parse(text)
    assert server_metrics.busy(text) == in_flight
    assert int(figures["llamacpp:requests_processing"] + figures["llamacpp:requests_deferred"]) == in_flight
    assert figures["llamacpp:n_decode_total"] >= 0


def test_a_server_without_figures_has_nothing_in_flight():
    assert server_metrics.busy("") == 0
    assert server_metrics.busy("# HELP nothing\n\n") == 0


def test_text_that_is_not_the_format_is_named():
    with pytest.raises(server_metrics.MetricsError, match="line 2 of the metrics is no sample: '<html>'"):
        server_metrics.parse("llamacpp:requests_processing 1\n<html>\n")
