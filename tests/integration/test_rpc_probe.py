"""rpc_probe against a real llama.cpp RPC worker started by the test: ok, busy, closed, wrong protocol."""

import socket
import struct
import threading

import pytest

from ansible_collections.graviton.llama_rpc.plugins.modules import rpc_probe
from tests.tools import llama_cpp
from tests.unit.plugins.module_runner import run_module


@pytest.fixture()
def worker(x86_build):
    with llama_cpp.loopback_workers(x86_build, 1, threads=1) as [endpoint]:
        yield endpoint


def hello(sock):
    sock.sendall(llama_cpp.RPC_HELLO)
    (length,) = struct.unpack("<Q", sock.recv(8))
    return sock.recv(length)


def test_a_worker_answers_with_its_protocol_and_memory(worker, capsys):
    version = llama_cpp.protocol_version()
    result = run_module(rpc_probe.main, capsys, workers=[worker], protocol_version=version)
    assert result["all_ok"] is True and result["counts"] == {"ok": 1}
    probed = result["workers"][0]
    assert probed["state"] == "ok" and probed["protocol"] == version and probed["compatible"] is True
    assert len(probed["devices"]) >= 1
    assert all(0 < device["free"] <= device["total"] for device in probed["devices"])
    assert probed["free_total"] == sum(device["free"] for device in probed["devices"])


def test_a_busy_worker_times_out_and_serves_again_after(worker, capsys):
    host, port = worker.rsplit(":", 1)
    holder = socket.create_connection((host, int(port)), timeout=5)
    assert len(hello(holder)) == 28  # the worker now serves this connection and nobody else
    try:
        result = run_module(rpc_probe.main, capsys, workers=[worker], timeout=1.0)
        assert result["workers"][0]["state"] == "timeout"
        assert "busy with another client" in result["workers"][0]["message"]
    finally:
        holder.close()
    # the connection the probe left behind is served (and dropped) next; then the worker is free again
    for attempt in range(20):
        result = run_module(rpc_probe.main, capsys, workers=[worker], timeout=2.0)
        if result["workers"][0]["state"] == "ok":
            print(f"the worker was free again at probe {attempt + 1}")
            break
    assert result["workers"][0]["state"] == "ok"


def test_a_closed_port_is_refused(capsys):
    result = run_module(rpc_probe.main, capsys, workers=[f"127.0.0.1:{llama_cpp.free_port()}"])
    assert result["workers"][0]["state"] == "refused" and result["all_ok"] is False


def test_something_else_on_the_port_is_the_wrong_protocol(capsys):
    """A service that speaks first, like sshd on a mistyped port: its banner is no RPC reply."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def banner():
        connection, _address = server.accept()
        connection.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
        connection.recv(64)
        connection.close()

    thread = threading.Thread(target=banner, daemon=True)
    thread.start()
    try:
        result = run_module(rpc_probe.main, capsys, workers=[f"127.0.0.1:{port}"], timeout=2.0)
    finally:
        thread.join(timeout=5)
        server.close()
    assert result["workers"][0]["state"] == "wrong_protocol", result["workers"][0]


def test_a_master_of_another_major_version_cannot_use_the_worker(worker, capsys):
    major = int(llama_cpp.protocol_version().split(".", maxsplit=1)[0])
    result = run_module(rpc_probe.main, capsys, workers=[worker], protocol_version=f"{major + 1}.0.0")
    probed = result["workers"][0]
    assert probed["state"] == "wrong_protocol" and probed["compatible"] is False
    assert "same llama.cpp build" in probed["message"]


def test_fail_unless_all_ok_names_each_unusable_worker(worker, capsys):
    closed = f"127.0.0.1:{llama_cpp.free_port()}"
    result = run_module(rpc_probe.main, capsys, workers=[worker, closed], fail_unless_all_ok=True)
    assert result["failed"] is True
    assert f"1 of 2 RPC workers are not usable: {closed}: refused" in result["msg"]
    assert result["counts"] == {"ok": 1, "refused": 1}


@pytest.mark.parametrize("workers, message", [
    ([], "workers has 0 entries"),
    ([f"10.0.0.{i}:50052" for i in range(17)], "workers has 17 entries; llama.cpp uses 1 to 16"),
    (["10.0.0.1"], "is not host:port"),
    (["10.0.0.1:70000"], "from 1 to 65535"),
])
def test_bad_worker_lists_are_refused(capsys, workers, message):
    result = run_module(rpc_probe.main, capsys, workers=workers)
    assert result["failed"] is True and message in result["msg"]
