"""A client of the gateway (role gateway), for the tests that run it alone and in the cluster scenario: one request
over TLS with a client key, and what plain HTTP on the gateway's port gets."""

import json
import socket
import urllib.error
import urllib.request


def call(gateway, path, body=None, key=None, timeout=60):
    """One request through the gateway (gateway.url, gateway.context: a TLS context that trusts its certificate):
    (status, the cluster that answered, body); status 0 when no HTTP reply came. No key: no Authorization header."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(gateway.url + path, data=None if body is None else json.dumps(body).encode(),
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, context=gateway.context, timeout=timeout) as reply:
            return reply.status, reply.headers.get("X-Llama-Cluster"), reply.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("X-Llama-Cluster"), error.read().decode("utf-8", "replace")
    except (OSError, urllib.error.URLError) as error:
        return 0, None, repr(error)


def plain_http_answer(url, key):
    """The first bytes the gateway's port sends back to a plain HTTP request (b"" when it closes the connection)."""
    host, port = url.removeprefix("https://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as plain:
        plain.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
        try:
            return plain.recv(1024)
        except ConnectionResetError:
            return b""
