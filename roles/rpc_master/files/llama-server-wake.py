# Installed by the graviton.llama_rpc collection (role rpc_master): a deploy overwrites changes made here.
"""Starts llama-server when its key asks: the wake of a stopped cluster, for the gateway (role gateway).

systemd runs this once per connection to the wake socket (llama-server-wake.socket, Accept=yes: the connection is
stdin and stdout). The client sends llama-server's API key on one line; with the right key this asks systemd to start
llama-server (and its watchdog, when it is installed) without waiting for them, and answers "starting" and the state
llama-server was in; with another it answers "refused" and starts nothing. Both are written to the journal with the
client's address, never the key. So whoever can reach the port can do one thing, and only with the key: start the
llama-server that the last deploy configured, which is what the idle stop stopped. It cannot stop, change or read
anything. The key comes from the unit's EnvironmentFile (LLAMA_API_KEY, root only).
"""

import hmac
import os
import signal
import subprocess
import sys

MAX_LINE = 1024  # a key is shorter; anything longer is refused unread


def log(message):
    print(message, file=sys.stderr, flush=True)  # the journal (stdout is the client)


def verdict(line, key):
    """True when the line the client sent is the key (compared in constant time); an empty key opens nothing."""
    sent = line.rstrip(b"\r\n")
    return bool(key) and hmac.compare_digest(sent, key.encode())


def main(environ=None, stdin=None, stdout=None, systemctl=("systemctl",)):
    environ = os.environ if environ is None else environ
    stdin = sys.stdin.buffer if stdin is None else stdin
    stdout = sys.stdout.buffer if stdout is None else stdout
    client = environ.get("REMOTE_ADDR", "?")
    units = environ.get("WAKE_UNITS", "llama-server.service").split()
    signal.alarm(int(environ.get("WAKE_READ_TIMEOUT", "5")))  # a client that sends nothing is cut off
    line = stdin.readline(MAX_LINE)
    signal.alarm(0)
    if not verdict(line, environ.get("LLAMA_API_KEY", "")):
        log("refused a wake from %s: not llama-server's key" % client)
        stdout.write(b"refused\n")
        stdout.flush()
        return 1
    state = subprocess.run([*systemctl, "is-active", units[0]], check=False, capture_output=True,
                           text=True).stdout.strip() or "unknown"
    started = subprocess.run([*systemctl, "start", "--no-block", *units], check=False, capture_output=True, text=True)
    if started.returncode != 0:
        log("a wake from %s could not start %s: %s" % (client, " ".join(units), started.stderr.strip()))
        stdout.write(b"failed\n")
        stdout.flush()
        return 1
    log("a wake from %s: starting %s (%s was %s)" % (client, " ".join(units), units[0], state))
    stdout.write(("starting %s\n" % state).encode())
    stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
