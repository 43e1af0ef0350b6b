"""A model host for the tests, standing in for Hugging Face: serves a directory over HTTP, answers only requests that
carry its bearer token (401 without one, 403 with another), honours Range requests (206, Content-Range), and can cut
a file's first download short to test resuming. It counts the bytes it sends per file and names the downloads it cut
(GET /_sent: {"sent": {name: bytes}, "cut": [name...]}).

Standard library only: the tests run it on the master container (python3, no venv) as well as on the controller.

    python3 model_server.py DIRECTORY --port 8000 [--bind 127.0.0.1] [--token SECRET] [--cut NAME:BYTES ...]
                                              [--rate BYTES_PER_SECOND]
"""

import argparse
import json
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

CHUNK = 1 << 20


class ModelHost(BaseHTTPRequestHandler):
    directory = "."
    token = ""
    cuts = {}  # file name -> bytes after which its first GET is cut
    sent = {}
    cut = []
    rate = 0  # bytes per second per download; 0: as fast as it goes
    lock = threading.Lock()

    def log_message(self, format, *args):  # quiet: the tests read /_sent
        pass

    def _refuse(self, code, text):
        body = (text + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 (http.server's name)
        path = unquote(urlsplit(self.path).path)
        if path == "/_sent":
            with self.lock:
                body = json.dumps({"sent": self.sent, "cut": self.cut}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.token:
            given = self.headers.get("Authorization", "")
            if not given:
                return self._refuse(401, "a token is required")
            if given != "Bearer " + self.token:
                return self._refuse(403, "this token has no access")
        name = os.path.basename(path)
        file_path = os.path.join(self.directory, name)
        if not name or not os.path.isfile(file_path):
            return self._refuse(404, "no such file")
        size = os.path.getsize(file_path)
        start, end = 0, size - 1
        ranged = re.match(r"^bytes=(\d+)-(\d*)$", self.headers.get("Range", ""))
        if ranged:
            start = int(ranged.group(1))
            end = min(int(ranged.group(2)), size - 1) if ranged.group(2) else size - 1
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        else:
            self.send_response(200)
        length = end + 1 - start
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        with self.lock:  # the first download of the file that would pass the cut is cut there
            limit = self.cuts.pop(name) if self.cuts.get(name, length) < length else None
        with open(file_path, "rb") as handle:
            handle.seek(start)
            sent, began = 0, time.monotonic()
            while sent < length:
                if self.rate:  # a slow link: never ahead of the rate
                    time.sleep(max(0.0, sent / self.rate - (time.monotonic() - began)))
                block = handle.read(min(CHUNK, length - sent) if limit is None else min(CHUNK, limit - sent))
                if not block:
                    break
                try:
                    self.wfile.write(block)
                except OSError:
                    break
                sent += len(block)
                if limit is not None and sent >= limit:
                    self.close_connection = True
                    with self.lock:
                        self.cut.append(name)
                    break
        with self.lock:
            self.sent[name] = self.sent.get(name, 0) + sent
        if limit is not None:
            self.connection.shutdown(2)  # as a server or network that drops the transfer


def serve(directory, port, bind="127.0.0.1", token="", cuts=None, rate=0):
    """A running server (in a thread); .shutdown() stops it."""
    settings = {"directory": str(directory), "token": token, "cuts": dict(cuts or {}), "sent": {}, "cut": [],
                "rate": rate, "lock": threading.Lock()}
    handler = type("Handler", (ModelHost,), settings)
    server = ThreadingHTTPServer((bind, port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--token", default=os.environ.get("MODEL_SERVER_TOKEN", ""))
    parser.add_argument("--cut", action="append", default=[], help="NAME:BYTES, cut NAME's first download after BYTES")
    parser.add_argument("--rate", type=int, default=0, help="send each download at most this fast (bytes per second)")
    args = parser.parse_args()
    cuts = {name: int(count) for name, count in (item.rsplit(":", 1) for item in args.cut)}
    server = serve(args.directory, args.port, args.bind, args.token, cuts, args.rate)
    try:
        threading.Event().wait()
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
