# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A read-only client for llama.cpp's RPC protocol (ggml-rpc, protocol 7.x): enough to tell whether a
worker is up, which protocol it speaks, and how much memory its devices have.

Wire format (little-endian, packed): a request is u8 command | u64 payload length | payload; a reply
is u64 length | payload. HELLO must come first on a connection. A worker serves one connection at a
time: a worker busy with another client accepts the TCP connection but never answers HELLO, so every
read has a timeout.
"""

from __future__ import annotations

import errno
import socket
import struct
import time

# llama.cpp's limit on RPC servers per master (GGML_RPC_MAX_SERVERS).
MAX_WORKERS = 16

CMD_GET_DEVICE_MEMORY = 11
CMD_HELLO = 14
CMD_DEVICE_COUNT = 15
CONN_CAPS_SIZE = 24
HELLO_REPLY_SIZE = 4 + CONN_CAPS_SIZE

# Worker states, as rpc_probe reports them.
OK = "ok"
REFUSED = "refused"  # nothing listens on the port (or a firewall rejects)
TIMEOUT = "timeout"  # no answer in time: busy with another client, or a firewall drops
UNREACHABLE = "unreachable"  # no route, or the name does not resolve
WRONG_PROTOCOL = "wrong_protocol"  # answers, but not an RPC protocol this master can use
ERROR = "error"


class ProbeError(Exception):
    def __init__(self, state, message):
        super().__init__(message)
        self.state = state


def parse_endpoint(endpoint):
    """'host:port' or '[v6]:port' -> (host, port); ValueError with the reason otherwise."""
    host, sep, port = endpoint.strip().rpartition(":")
    if not sep or not host:
        raise ValueError("%r is not host:port" % endpoint)
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError("%r: the port must be a number from 1 to 65535" % endpoint)
    return host, int(port)


def version_tuple(version):
    parts = [int(part) for part in str(version).split(".")]
    return tuple(parts + [0] * (3 - len(parts)))[:3]


def compatible(client_version, server_version):
    """A master (client) can use a worker (server) of the same major version whose minor is not newer."""
    client, server = version_tuple(client_version), version_tuple(server_version)
    return client[0] == server[0] and server[1] <= client[1]


class RpcConnection:
    def __init__(self, host, port, timeout):
        self.deadline = time.monotonic() + timeout
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except socket.timeout:
            raise ProbeError(TIMEOUT, "no TCP connection within %gs (a firewall that drops, or no such host)" % timeout)
        except socket.gaierror as error:
            raise ProbeError(UNREACHABLE, "cannot resolve %s: %s" % (host, error))
        except OSError as error:
            if error.errno == errno.ECONNREFUSED:
                raise ProbeError(REFUSED, "connection refused: nothing listens on %s:%d" % (host, port))
            if error.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
                raise ProbeError(UNREACHABLE, "%s: %s" % (host, error.strerror))
            raise ProbeError(ERROR, "connect to %s:%d: %s" % (host, port, error))

    def close(self):
        self.sock.close()

    def _recv_exact(self, size):
        data = b""
        while len(data) < size:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout()
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ProbeError(WRONG_PROTOCOL, "the worker closed the connection after %d of %d bytes" % (len(data), size))
            data += chunk
        return data

    def call(self, command, payload, reply_size):
        try:
            self.sock.sendall(struct.pack("<BQ", command, len(payload)) + payload)
            (length,) = struct.unpack("<Q", self._recv_exact(8))
            if length != reply_size:
                raise ProbeError(WRONG_PROTOCOL, "command %d: reply of %d bytes, expected %d" % (command, length, reply_size))
            return self._recv_exact(reply_size)
        except socket.timeout:
            raise ProbeError(TIMEOUT, "connected, but no answer to command %d in time: the worker is busy with "
                                      "another client (it serves one at a time) or hung" % command)
        except OSError as error:
            raise ProbeError(ERROR, "command %d: %s" % (command, error))

    def hello(self):
        reply = self.call(CMD_HELLO, bytes(CONN_CAPS_SIZE), HELLO_REPLY_SIZE)
        return "%d.%d.%d" % struct.unpack("<BBB", reply[:3])

    def device_count(self):
        return struct.unpack("<I", self.call(CMD_DEVICE_COUNT, b"", 4))[0]

    def device_memory(self, device):
        free, total = struct.unpack("<QQ", self.call(CMD_GET_DEVICE_MEMORY, struct.pack("<I", device), 16))
        return {"index": device, "free": free, "total": total}


def probe(endpoint, timeout=5.0, client_version=None):
    """Probe one worker; never raises. Returns a dict: endpoint, state, message, protocol, compatible,
    devices [{index, free, total}], free_total (bytes, all devices), elapsed_ms."""
    started = time.monotonic()
    result = {"endpoint": endpoint, "state": OK, "message": "", "protocol": None, "compatible": None,
              "devices": [], "free_total": 0, "elapsed_ms": 0}
    try:
        host, port = parse_endpoint(endpoint)
        connection = RpcConnection(host, port, timeout)
        try:
            result["protocol"] = connection.hello()
            if client_version is not None:
                result["compatible"] = compatible(client_version, result["protocol"])
                if not result["compatible"]:
                    raise ProbeError(WRONG_PROTOCOL, "the worker speaks RPC protocol %s; this master needs %s.x with a minor "
                                                     "of at most %s: master and workers must come from the same llama.cpp "
                                                     "build" % (result["protocol"], version_tuple(client_version)[0],
                                                                version_tuple(client_version)[1]))
            result["devices"] = [connection.device_memory(index) for index in range(connection.device_count())]
            result["free_total"] = sum(device["free"] for device in result["devices"])
        finally:
            connection.close()
    except ValueError as error:
        result.update(state=ERROR, message=str(error))
    except ProbeError as error:
        result.update(state=error.state, message=str(error))
    result["elapsed_ms"] = int((time.monotonic() - started) * 1000)
    if result["state"] == OK:
        result["message"] = "RPC protocol %s, %d device(s)" % (result["protocol"], len(result["devices"]))
    return result
