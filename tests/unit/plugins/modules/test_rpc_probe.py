"""rpc_probe's own decisions, on real sockets on loopback: every endpoint checked before any is probed, each worker's
state in the order given, and fail_unless_all_ok naming each worker that is not usable. A real rpc-server's answers
(ok, its devices, a busy worker) are tests/integration/test_rpc_probe.py's."""

import socket
import threading

import pytest
from ansible_collections.graviton.llama_rpc.plugins.modules import rpc_probe

from tests.tools import llama_cpp
from tests.unit.plugins.module_runner import run_module


@pytest.fixture()
def http_server():
    """A listener that answers anything with an HTTP error: not llama.cpp's RPC protocol."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _address = listener.accept()
            except OSError:
                continue
            with connection:
                connection.settimeout(2)
                try:
                    connection.recv(64)
                    connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield "127.0.0.1:%d" % listener.getsockname()[1]
    stop.set()
    thread.join()
    listener.close()


@pytest.mark.parametrize("arguments, message", [
    ({"workers": []}, "workers has 0 entries; llama.cpp uses 1 to 16 RPC workers"),
    ({"workers": ["10.0.0.%d:50052" % n for n in range(17)]}, "workers has 17 entries"),
    ({"workers": ["10.0.0.1:50052", "10.0.0.2", "[::1:50052"]}, "workers: "),
    ({"workers": ["10.0.0.1:50052"], "timeout": 0}, "timeout must be more than 0 seconds, got 0"),
    ({"workers": ["10.0.0.1:50052"], "protocol_version": "seven"}, "protocol_version must look like 7.0.0, got 'seven'"),
])
def test_bad_arguments_are_refused_before_any_worker_is_asked(capsys, arguments, message):
    result = run_module(rpc_probe.main, capsys, **arguments)
    assert result["failed"] and message in result["msg"] and "workers" not in result  # nothing probed


def test_each_worker_gets_its_state_in_the_order_given(capsys, http_server):
    closed = "127.0.0.1:%d" % llama_cpp.free_port()
    result = run_module(rpc_probe.main, capsys, workers=[http_server, closed], timeout=2)
    assert [(worker["endpoint"], worker["state"]) for worker in result["workers"]] == [
        (http_server, "wrong_protocol"), (closed, "refused")]
    assert result["counts"] == {"wrong_protocol": 1, "refused": 1} and result["all_ok"] is False
    assert not result.get("failed") and result["changed"] is False


def test_fail_unless_all_ok_names_each_unusable_worker(capsys, http_server):
    closed = "127.0.0.1:%d" % llama_cpp.free_port()
    result = run_module(rpc_probe.main, capsys, workers=[closed, http_server], timeout=2, fail_unless_all_ok=True)
    assert result["failed"] and result["msg"].startswith("2 of 2 RPC workers are not usable: %s: refused (" % closed)
    assert "%s: wrong_protocol (" % http_server in result["msg"] and len(result["workers"]) == 2
