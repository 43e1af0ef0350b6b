# Installed by the graviton.llama_rpc collection (role rpc_master): a deploy overwrites changes made here.
"""Starts llama-server when its key asks: the wake of a stopped cluster, for the gateway (role gateway); and tells the
gateways whether to send it requests (their agent checks).

systemd runs this once per connection to the wake socket (llama-server-wake.socket, Accept=yes: the connection is
stdin and stdout). The client sends one line:
- llama-server's API key: this asks systemd to start llama-server (and its companions, when they are installed)
  without waiting for them, calls off an idle stop announced to the gateways (llama-server-idle-stop.py), and answers
  "starting" and the state llama-server was in; another line that is not "state" is refused ("refused"), and starts
  nothing. Both are written to the journal with the client's address, never the key.
- "state": HAProxy's agent check (role gateway). It answers "up" only while llama-server serves: its unit is active,
  no idle stop is announced, and its /health (WAKE_HEALTH_URL) answers 200 within HEALTH_TIMEOUT seconds. While it
  starts or loads its model (/health answers 503 "Loading model") the answer is "down", so that a gateway holds a
  request for the wake instead of passing it to a server that cannot answer it yet. It notes the time of the check for
  the idle stop. Nothing is written to the journal (a check comes every few seconds).
So whoever can reach the port can learn whether llama-server serves, and with the key do one thing: start the
llama-server that the last deploy configured, which is what the idle stop stopped. It cannot stop, change or read
anything else. The key comes from the unit's EnvironmentFile (LLAMA_API_KEY, root only).
"""

import hmac
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

MAX_LINE = 1024  # a key is shorter; anything longer is refused unread
HEALTH_TIMEOUT = 2  # seconds; under the gateway's check timeout
STATE = b"state"
ANNOUNCED, ASKED = "idle-stopping", "gateway-asked"  # as llama-server-idle-stop.py names them


def log(message):
    print("<5>" + message, file=sys.stderr, flush=True)  # the journal (stdout is the client), at notice


def verdict(line, key):
    """True when the line the client sent is the key (compared in constant time); an empty key opens nothing."""
    sent = line.rstrip(b"\r\n")
    return bool(key) and hmac.compare_digest(sent, key.encode())


def serves(url, timeout=HEALTH_TIMEOUT):
    """Whether llama-server's /health answers 200 (it answers 503 while it loads the model)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return reply.status == 200
    except (OSError, urllib.error.URLError, ValueError):
        return False


def agent_answer(state_dir, serving):
    """The agent check's answer: "down" while a stop is announced or llama-server does not serve, else "up". Notes the
    check's time (ASKED)."""
    try:
        with open(os.path.join(state_dir, ASKED), "w"):
            pass
    except OSError:
        pass  # the directory is made by the idle stop's unit: without an idle stop nobody reads it
    return "down" if os.path.exists(os.path.join(state_dir, ANNOUNCED)) or not serving else "up"


def main(environ=None, stdin=None, stdout=None, systemctl=("systemctl",)):
    environ = os.environ if environ is None else environ
    stdin = sys.stdin.buffer if stdin is None else stdin
    stdout = sys.stdout.buffer if stdout is None else stdout
    client = environ.get("REMOTE_ADDR", "?")
    units = environ.get("WAKE_UNITS", "llama-server.service").split()
    state_dir = environ.get("WAKE_STATE_DIR", "/run/llama-rpc")
    signal.alarm(int(environ.get("WAKE_READ_TIMEOUT", "5")))  # a client that sends nothing is cut off
    line = stdin.readline(MAX_LINE)
    signal.alarm(0)

    def is_active():
        return subprocess.run([*systemctl, "is-active", units[0]], check=False, capture_output=True,
                              text=True).stdout.strip() or "unknown"
    if line.rstrip(b"\r\n") == STATE:
        health_url = environ.get("WAKE_HEALTH_URL", "")
        serving = is_active() == "active" and bool(health_url) and serves(health_url)
        stdout.write((agent_answer(state_dir, serving) + "\n").encode())
        stdout.flush()
        return 0
    if not verdict(line, environ.get("LLAMA_API_KEY", "")):
        log("refused a wake from %s: not llama-server's key" % client)
        stdout.write(b"refused\n")
        stdout.flush()
        return 1
    state = is_active()
    try:
        os.unlink(os.path.join(state_dir, ANNOUNCED))  # an idle stop announced is called off
        log("a wake from %s called off the idle stop announced to the gateways" % client)
    except OSError:
        pass
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
