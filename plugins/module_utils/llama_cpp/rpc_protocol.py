# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A client for llama.cpp's RPC protocol (ggml-rpc, protocol 7.x): enough to tell whether a worker is up, which
protocol it speaks and how much memory its devices have, and to fill its tensor cache the way a load does (a
SET_TENSOR with the cache flag: the worker itself writes the file, named by the hash of the bytes it received).

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

CMD_ALLOC_BUFFER = 0
CMD_BUFFER_GET_BASE = 3
CMD_FREE_BUFFER = 4
CMD_SET_TENSOR = 6
CMD_SET_TENSOR_HASH = 7
CMD_GET_DEVICE_MEMORY = 11
CMD_HELLO = 14
CMD_DEVICE_COUNT = 15
CONN_CAPS_SIZE = 24
HELLO_REPLY_SIZE = 4 + CONN_CAPS_SIZE

# struct rpc_tensor of ggml-rpc.cpp (packed): id, type, buffer, ne[4], nb[4], op, op_params[16], flags, src[10],
# view_src, view_offs, data, name[64], use_count.
RPC_TENSOR = struct.Struct("<QIQ4I4II16ii10QQQQ64si")
GGML_TYPE_I8 = 24  # one byte per element: a tensor of raw bytes
STAGING_ROW = 1 << 20  # a staged tensor is rows of 1 MiB (ne and nb are 32-bit on the wire; tensors pass 4 GiB)

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
        self.timeout = timeout
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

    def renew(self):
        """A new deadline for the next command (a long session: each command gets the timeout)."""
        self.deadline = time.monotonic() + self.timeout

    def send_only(self, command, payload, file=None, offset=0, count=0):
        """A command the worker does not answer; the file's range [offset, offset + count) follows the payload,
        copied by the kernel (socket.sendfile). Errors as ProbeError."""
        try:
            self.sock.settimeout(self.timeout)
            self.sock.sendall(struct.pack("<BQ", command, len(payload) + count) + payload)
            if count:
                sent = self.sock.sendfile(file, offset=offset, count=count)
                if sent != count:
                    raise ProbeError(ERROR, "%s ends %d bytes before the end of the range sent" % (file.name, count - sent))
        except socket.timeout:
            raise ProbeError(TIMEOUT, "command %d: the worker stopped reading for %gs" % (command, self.timeout))
        except OSError as error:
            raise ProbeError(ERROR, "command %d: %s (the worker closed the connection: read its journal)" % (command, error))

    def hello(self):
        reply = self.call(CMD_HELLO, bytes(CONN_CAPS_SIZE), HELLO_REPLY_SIZE)
        return "%d.%d.%d" % struct.unpack("<BBB", reply[:3])

    def device_count(self):
        return struct.unpack("<I", self.call(CMD_DEVICE_COUNT, b"", 4))[0]

    def device_memory(self, device):
        free, total = struct.unpack("<QQ", self.call(CMD_GET_DEVICE_MEMORY, struct.pack("<I", device), 16))
        return {"index": device, "free": free, "total": total}


def staging_shape(size):
    """(ne, nb, nbytes) of the raw-byte tensor a staged tensor of `size` bytes is sent as: rows of STAGING_ROW bytes,
    enough of them to hold it (the worker checks each write against ggml_nbytes, and nb[2..3] are never used)."""
    rows = -(-size // STAGING_ROW)
    nbytes = rows * STAGING_ROW
    return (STAGING_ROW, rows, 1, 1), (1, STAGING_ROW, nbytes & 0xFFFFFFFF, nbytes & 0xFFFFFFFF), nbytes


class CacheStager:
    """Fills a worker's tensor cache (rpc-server started with -c) through its own protocol, as a load would on a miss:
    one buffer on the worker, each tensor sent into it with the cache flag (the worker writes <cache>/<FNV-1a 64 of
    the bytes>), then asked back by that name (SET_TENSOR_HASH: found means stored under the name the master expects).
    The worker serves one client at a time: nothing else may hold it meanwhile."""

    def __init__(self, endpoint, timeout, protocol_major=7):
        host, port = parse_endpoint(endpoint)
        self.connection = RpcConnection(host, port, timeout)
        self.buffer = None
        version = self.connection.hello()
        if version_tuple(version)[0] != protocol_major:
            self.close()
            raise ProbeError(WRONG_PROTOCOL, "the worker speaks RPC protocol %s; staging speaks %d.x" % (version, protocol_major))

    def close(self):
        try:
            if self.buffer:
                self.connection.send_only(CMD_FREE_BUFFER, struct.pack("<Q", self.buffer[0]))
        finally:
            self.connection.close()

    def allocate(self, largest):
        """One buffer on device 0 that holds the largest tensor to stage."""
        nbytes = staging_shape(largest)[2]
        self.connection.renew()
        remote, remote_size = struct.unpack("<QQ", self.connection.call(CMD_ALLOC_BUFFER, struct.pack("<IQ", 0, nbytes), 16))
        if not remote:
            raise ProbeError(ERROR, "the worker could not allocate %d MiB to receive a tensor in: free memory there (is "
                                    "another process holding it?)" % (nbytes >> 20))
        self.connection.renew()
        (base,) = struct.unpack("<Q", self.connection.call(CMD_BUFFER_GET_BASE, struct.pack("<Q", remote), 8))
        self.buffer = (remote, base, remote_size)

    def _tensor(self, size):
        remote, base, _size = self.buffer
        ne, nb, _nbytes = staging_shape(size)
        return RPC_TENSOR.pack(1, GGML_TYPE_I8, remote, *ne, *nb, 0, *([0] * 16), 0, *([0] * 10), 0, 0, base,
                               b"staged", 0)

    def stage(self, file, offset, size, name):
        """Send file[offset:offset+size] with the cache flag, then ask for it by `name`: True when the worker has a
        cache file of that name (its bytes hashed to it)."""
        tensor = self._tensor(size)
        self.connection.renew()
        self.connection.send_only(CMD_SET_TENSOR, tensor + struct.pack("<BQ", 1, 0), file, offset, size)
        self.connection.renew()
        reply = self.connection.call(CMD_SET_TENSOR_HASH, tensor + struct.pack("<QQ", 0, int(name, 16)), 1)
        return reply == b"\x01"


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
