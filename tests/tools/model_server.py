"""A model host for the tests, standing in for Hugging Face: serves a directory (and its subdirectories) over HTTP,
answers only requests that carry its bearer token (401 without one, 403 with another), honours Range requests (206,
Content-Range), names each file's version (ETag and Last-Modified, from its inode, size and modification time), and can
cut a file's first download short to test resuming. It counts the bytes it sends per file (by its path under the
directory) and names the downloads it cut; GET /_sent answers {"sent": {path: bytes}, "cut": [path...], "authorized":
{path: [whether each request carried a token]}, "ranges": {path: [each request's Range header, "" for none]}}.

Faults a test turns on while it runs, through GET /_control?... (each answers the settings now in force):
- refuse_after=BYTES&code=CODE: every request that starts once the host has sent BYTES of .gguf files gets CODE (a
  token revoked, a repository gone, midway through a set);
- stall=PATH:BYTES: every download of PATH stops after BYTES and never sends more (a source that hangs);
- rate=BYTES_PER_SECOND: send each download at most this fast (0: as fast as it goes), as a CDN edge caps a connection;
- no_ranges=1: answer every request with the whole file (200), as a source that ignores Range does;
- redirect=PATH:URL: answer PATH with a 302 to URL (a CDN on another host);
- reset=1: none of these.

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
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

CHUNK = 1 << 20


class ModelHost(BaseHTTPRequestHandler):
    directory = "."
    token = ""
    cuts = {}  # file path -> bytes after which its first GET is cut
    sent = {}
    cut = []
    authorized = {}
    ranges = {}
    faults = {}  # set through /_control
    rate = 0  # bytes per second per download; 0: as fast as it goes
    lock = threading.Lock()

    def log_message(self, format, *args):  # quiet: the tests read /_sent
        pass

    def _answer(self, code, body, headers=()):
        self.send_response(code)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _refuse(self, code, text):
        self._answer(code, (text + "\n").encode())

    def _control(self, query):
        settings = parse_qs(query)
        with self.lock:
            if "reset" in settings:
                self.faults.clear()
                self.faults["rate"] = type(self).rate
            if "refuse_after" in settings:
                self.faults["refuse_after"] = (int(settings["refuse_after"][0]), int(settings.get("code", ["403"])[0]))
            for key in ("stall", "redirect"):
                for item in settings.get(key, []):
                    name, value = item.split(":", 1)
                    self.faults.setdefault(key, {})[name.lstrip("/")] = int(value) if key == "stall" else value
            if "rate" in settings:
                self.faults["rate"] = int(settings["rate"][0])
            if "no_ranges" in settings:
                self.faults["no_ranges"] = settings["no_ranges"][0] == "1"
            body = json.dumps(dict(self.faults)).encode()
        self._answer(200, body)

    def do_GET(self):  # noqa: N802 (http.server's name)
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        if path == "/_sent":
            with self.lock:
                body = json.dumps({"sent": self.sent, "cut": self.cut, "authorized": self.authorized,
                                   "ranges": self.ranges}).encode()
            return self._answer(200, body)
        if path == "/_control":
            return self._control(parts.query)
        name = os.path.normpath(path.lstrip("/"))
        with self.lock:
            self.authorized.setdefault(name, []).append(bool(self.headers.get("Authorization")))
            self.ranges.setdefault(name, []).append(self.headers.get("Range", ""))
            refuse_after = self.faults.get("refuse_after")
            if refuse_after and sum(count for sent, count in self.sent.items() if sent.endswith(".gguf")) >= refuse_after[0]:
                return self._refuse(refuse_after[1], "refused from now on")
            redirect = self.faults.get("redirect", {}).get(name)
            stall = self.faults.get("stall", {}).get(name)
            rate = self.faults.get("rate", self.rate)
            no_ranges = self.faults.get("no_ranges", False)
        if redirect:
            return self._answer(302, b"", [("Location", redirect)])
        if self.token:
            given = self.headers.get("Authorization", "")
            if not given:
                return self._refuse(401, "a token is required")
            if given != "Bearer " + self.token:
                return self._refuse(403, "this token has no access")
        file_path = os.path.join(self.directory, name)
        if name.startswith("..") or not os.path.isfile(file_path):
            return self._refuse(404, "no such file")
        status = os.stat(file_path)
        size = status.st_size
        start, end = 0, size - 1
        ranged = None if no_ranges else re.match(r"^bytes=(\d+)-(\d*)$", self.headers.get("Range", ""))
        if ranged:
            start = int(ranged.group(1))
            end = min(int(ranged.group(2)), size - 1) if ranged.group(2) else size - 1
            if start >= size:
                return self._answer(416, b"", [("Content-Range", "bytes */%d" % size)])
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        else:
            self.send_response(200)
        length = end + 1 - start
        self.send_header("Content-Length", str(length))
        if not no_ranges:
            self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", '"%x-%x-%x"' % (status.st_ino, size, status.st_mtime_ns))
        self.send_header("Last-Modified", formatdate(status.st_mtime, usegmt=True))
        self.end_headers()
        with self.lock:  # the first download of the file that would pass the cut is cut there
            limit = self.cuts.pop(name) if self.cuts.get(name, length) < length else None
        if stall is not None and start + length > stall:
            limit = max(0, stall - start)
        with open(file_path, "rb") as handle:
            handle.seek(start)
            sent, began = 0, time.monotonic()
            while sent < length:
                if rate:  # a slow link: never ahead of the rate
                    time.sleep(max(0.0, sent / rate - (time.monotonic() - began)))
                block = handle.read(min(CHUNK, length - sent) if limit is None else min(CHUNK, limit - sent))
                if not block:
                    break
                # counted before it goes out: a client that has read the bytes and asks /_sent at once finds them
                # (counted after, a thread could answer /_sent in between); a block the connection refused is taken back
                with self.lock:
                    self.sent[name] = self.sent.get(name, 0) + len(block)
                try:
                    self.wfile.write(block)
                except OSError:
                    with self.lock:
                        self.sent[name] -= len(block)
                    break
                sent += len(block)
                if limit is not None and sent >= limit:
                    break
        if stall is not None and limit is not None:
            self.wfile.flush()
            while True:  # never another byte, the connection held open: the client's read times out
                try:
                    if not self.connection.recv(1, 0):
                        break
                except OSError:
                    break
            return
        if limit is not None:
            self.close_connection = True
            with self.lock:
                self.cut.append(name)
            self.connection.shutdown(2)  # as a server or network that drops the transfer


def serve(directory, port, bind="127.0.0.1", token="", cuts=None, rate=0):
    """A running server (in a thread); .shutdown() stops it."""
    settings = {"directory": str(directory), "token": token, "cuts": dict(cuts or {}), "sent": {}, "cut": [],
                "authorized": {}, "ranges": {}, "faults": {}, "rate": rate, "lock": threading.Lock()}
    handler = type("Handler", (ModelHost,), settings)
    server = ThreadingHTTPServer((bind, port), handler)
    server.daemon_threads = True  # a stalled download's thread does not hold the shutdown
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
