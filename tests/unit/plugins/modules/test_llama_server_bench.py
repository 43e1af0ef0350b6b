"""The concurrency benchmark's client against a local HTTP server that streams as llama-server does (server-sent
events, a usage chunk last). The cluster scenario runs it against the real llama-server."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible_collections.graviton.llama_rpc.plugins.modules import llama_server_bench

from tests.unit.plugins.module_runner import run_module

KEY = "unit-test-key"


class Streaming(BaseHTTPRequestHandler):
    """Answers /v1/chat/completions with max_tokens one-token chunks, 20 ms apart; every request after the first
    `closes_after` ones is cut off after its first token (a worker's fault, as a client sees it)."""

    closes_after = None
    served = 0
    most_at_once = 0
    in_flight = 0
    lock = threading.Lock()

    def log_message(self, *_args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != "Bearer " + KEY:
            self.send_response(401)
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "Invalid API Key"}}')
            return
        with Streaming.lock:
            Streaming.served += 1
            Streaming.in_flight += 1
            Streaming.most_at_once = max(Streaming.most_at_once, Streaming.in_flight)
            cut = Streaming.closes_after is not None and Streaming.served > Streaming.closes_after
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.event({"choices": [{"delta": {"role": "assistant", "content": None}}]})
        for _token in range(body["max_tokens"]):
            time.sleep(0.02)
            self.event({"choices": [{"delta": {"content": "x"}}]})
            if cut:
                break
        # Done before the client can know it is: its next request is never counted beside this one.
        with Streaming.lock:
            Streaming.in_flight -= 1
        if not cut:
            self.event({"choices": [], "usage": {"completion_tokens": body["max_tokens"]}})
            self.wfile.write(b"data: [DONE]\n\n")

    def event(self, chunk):
        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self.wfile.flush()


@pytest.fixture
def server():
    Streaming.closes_after, Streaming.served, Streaming.most_at_once = None, 0, 0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Streaming)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield "http://127.0.0.1:%d" % httpd.server_address[1]
    httpd.shutdown()


def test_each_level_counts_the_servers_tokens_and_times_the_first(server, capsys):
    result = run_module(llama_server_bench.main, capsys, url=server, api_key=KEY, clients=[1, 4], requests_per_client=2,
                        max_tokens=6)
    one, four = result["levels"]
    assert (one["clients"], one["requests"], one["failed"], one["completion_tokens"]) == (1, 2, 0, 12)
    assert (four["clients"], four["requests"], four["failed"], four["completion_tokens"]) == (4, 8, 0, 48)
    assert Streaming.most_at_once == 4 and Streaming.served == 1 + 2 + 8  # the warm-up, then the levels
    # The first token comes after the 20 ms before it, the whole request after six of them (and never before its first
    # token, so neither does any percentile).
    for level in (one, four):
        assert 20 <= level["ttft_ms_p50"] <= level["ttft_ms_p95"] <= level["latency_ms_p95"], level
        assert level["latency_ms_p50"] >= 120 and level["seconds"] >= 2 * 0.12, level
        assert 0 < level["tokens_per_second"] <= level["completion_tokens"] / 0.24, level
    assert "unit-test-key" not in json.dumps(result)


def test_a_stream_cut_off_counts_as_failed_with_its_reason(server, capsys):
    Streaming.closes_after = 2  # the warm-up and one request pass
    result = run_module(llama_server_bench.main, capsys, url=server, api_key=KEY, clients=[2], requests_per_client=2,
                        max_tokens=4)
    level = result["levels"][0]
    assert (level["requests"], level["failed"]) == (4, 3) and level["completion_tokens"] == 4
    assert all("the stream ended without its usage" in error for error in level["errors"]), level["errors"]


def test_a_wrong_key_stops_before_measuring(server, capsys):
    result = run_module(llama_server_bench.main, capsys, url=server, api_key="wrong", clients=[1])
    assert result["failed"] and "did not answer a first request: HTTP 401" in result["msg"] and Streaming.served == 0


def test_bad_settings_are_named_together(capsys):
    result = run_module(llama_server_bench.main, capsys, url="10.0.0.1:8080", clients=[0, 2], max_tokens=0)
    assert result["failed"]
    for fragment in ("url must be http://HOST:PORT", "clients must list numbers of 1 or more", "max_tokens must be 1 or more"):
        assert fragment in result["msg"]
    assert "requests_per_client" not in result["msg"]


def test_percentile_is_nearest_rank():
    values = [float(value) for value in range(1, 21)]
    assert llama_server_bench.percentile(values, 0.5) == 10.0 and llama_server_bench.percentile(values, 0.95) == 19.0
    assert llama_server_bench.percentile([7.0], 0.95) == 7.0 and llama_server_bench.percentile([], 0.5) is None
