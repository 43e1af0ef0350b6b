"""Raw TCP throughput on the master -> worker path, for comparison with the model transfer rate.

    tcp_throughput.py sink ADDRESS PORT          (on the worker: read until the sender closes, then close)
    tcp_throughput.py send ADDRESS PORT MEGABYTES (on the master: print Mbit/s as JSON)
"""

import json
import socket
import sys
import time

CHUNK = 1 << 20


def sink(address, port):
    with socket.create_server((address, port)) as server:
        connection, _peer = server.accept()
        with connection:
            while connection.recv(CHUNK):
                pass


def send(address, port, megabytes):
    payload = b"\0" * CHUNK
    with socket.create_connection((address, port), timeout=60) as connection:
        started = time.monotonic()
        for _chunk in range(megabytes):
            connection.sendall(payload)
        connection.shutdown(socket.SHUT_WR)
        connection.recv(1)  # returns when the sink has read everything and closed
        elapsed = time.monotonic() - started
    print(json.dumps({"bytes": megabytes * CHUNK, "seconds": round(elapsed, 3),
                      "mbit_per_s": round(megabytes * CHUNK * 8 / elapsed / 1e6, 1)}))


if __name__ == "__main__":
    if sys.argv[1] == "sink":
        sink(sys.argv[2], int(sys.argv[3]))
    else:
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
