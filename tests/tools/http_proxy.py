"""A forward HTTP proxy for the tests, standard library only: it takes GET requests for absolute http:// URLs (what a
client sends to the proxy named in http_proxy), sends them on with their headers (Range, Authorization), streams the
answer back, and remembers each URL it carried (.forwarded on its handler class)."""

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailers",
              "transfer-encoding", "upgrade"}


class Proxy(BaseHTTPRequestHandler):
    forwarded = []
    lock = threading.Lock()

    def log_message(self, format, *args):  # quiet: the tests read .forwarded
        pass

    def do_GET(self):  # noqa: N802 (http.server's name)
        target = urlsplit(self.path)
        if target.scheme != "http" or not target.hostname:
            self.send_error(400, "an absolute http:// URL is what a proxy is asked for")
            return
        with self.lock:
            self.forwarded.append(self.path)
        connection = http.client.HTTPConnection(target.hostname, target.port or 80, timeout=60)
        headers = {name: value for name, value in self.headers.items() if name.lower() not in HOP_BY_HOP}
        connection.request("GET", target.path + ("?" + target.query if target.query else ""), headers=headers)
        answer = connection.getresponse()
        self.send_response(answer.status, answer.reason)
        for name, value in answer.getheaders():
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        while True:
            block = answer.read(1 << 20)
            if not block:
                break
            try:
                self.wfile.write(block)
            except OSError:
                break
        connection.close()


def serve(port, bind="127.0.0.1"):
    """A running proxy (in a thread); .shutdown() stops it."""
    handler = type("Handler", (Proxy,), {"forwarded": [], "lock": threading.Lock()})
    server = ThreadingHTTPServer((bind, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
