# Installed by the graviton.llama_rpc collection (role rpc_worker): a deploy overwrites changes made here.
"""Restarts an RPC worker that leaves a client waiting: one whose request has sat unread for the timeout.

llama.cpp's RPC worker serves one client at a time, reads it without a timeout, and sets no TCP keepalive. When the
path to the master drops every packet for a minute or two, the master's llama-server is restarted (its watchdog) and
the master's kernel gives up the old connection without the worker hearing of it. The worker then waits on that dead
connection for ever, and the new llama-server's connection waits behind it, its greeting unread: no client is served
again until someone restarts the worker (measured: make bench-faults). A frozen or deadlocked worker looks the same.

So the sign is a connection to the worker's port that is established, holds bytes the worker has not read, and has
received nothing new for TIMEOUT seconds: its client waits for an answer that does not come. (A client being served
sends its next command after each answer. Counting the unread bytes alone is not enough: a busy worker on starved
cores can hold one more command of the same size, a reused graph's, at every look while it answers them all, as
make bench-faults shows with a compile beside the serving cluster. A probe that gave up has closed its end and is not
counted.) Then this kills the worker,
which closes every connection, and systemd starts it again (Restart=always: a kill, not a stop, so this watchdog, which
is stopped and restarted with the worker, keeps its back-off); the master's llama-server restarts and loads again.

It also says, at each look, how long a client has waited for an answer (ANSWER_FILE, JSON: "waited_seconds" and "at",
read by role monitoring's figures for its alert on a worker that does not answer): the longest any connection has held
unread bytes with nothing new received; and while no client is connected, since a probe of the port (HELLO, answered
within PROBE_TIMEOUT seconds, at most every PROBE_EVERY seconds: the worker logs each connection) first went
unanswered. A frozen worker that serves nobody is found by the probe; one that a client waits on, by that client.
Settings come from the environment; the address and port from the instance's settings file.
"""

import json
import os
import socket
import struct
import subprocess
import sys
import time

HELLO = struct.pack("<BQ", 14, 24) + bytes(24)  # the RPC protocol's first command: u8 command, u64 size, 24 zero bytes
HELLO_REPLY = 8 + 28  # u64 size, then major, minor, patch, a pad byte and 24 bytes of capabilities


def log(message):
    print(message, flush=True)


def parse_waiting(listed):
    """{peer address:port: (unread bytes, bytes received so far)} of the connections in `ss -H -t -i -n state
    established` output that hold unread bytes (a socket's line, then its TCP information as key:value words)."""
    waiting, socket = {}, None
    for line in listed.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():  # Recv-Q Send-Q Local:Port Peer:Port
            fields = line.split()
            socket = (fields[3], int(fields[0])) if len(fields) >= 4 and fields[0].isdigit() else None
        elif socket is not None:  # the socket's TCP information, key:value words
            info = dict(word.split(":", 1) for word in line.split() if ":" in word)
            peer, unread = socket
            if unread > 0:
                waiting[peer] = (unread, int(info.get("bytes_received", "0")))
            socket = None
    return waiting


class StuckClients:
    """Which connections have held the same unread bytes, with nothing new received, for the timeout. A connection
    whose bytes received grow is being served, whatever its unread count (a busy worker on starved cores)."""

    def __init__(self, timeout):
        self.timeout = timeout
        self.since = {}  # peer -> ((unread bytes, bytes received), when first seen with them)

    def observe(self, waiting, now):
        """[(peer, unread bytes, seconds waited)] of the connections stuck at `now`, given parse_waiting's answer."""
        self.since = {peer: (seen, self.since[peer][1] if self.since.get(peer, (None,))[0] == seen else now)
                      for peer, seen in waiting.items()}
        return [(peer, seen[0], now - first) for peer, (seen, first) in self.since.items() if now - first >= self.timeout]

    def forget(self):
        self.since = {}

    def longest_wait(self, now):
        """The seconds the longest-waiting connection has held its unread bytes, with nothing new received."""
        return max((now - first for _seen, first in self.since.values()), default=0.0)


def answers(host, port, timeout):
    """Whether the worker answers a HELLO on its port within timeout (a client that another holds waits too)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as connection:
            connection.sendall(HELLO)
            received = b""
            while len(received) < HELLO_REPLY:  # all of it: a worker whose reply is cut may die of SIGPIPE outside systemd
                block = connection.recv(HELLO_REPLY - len(received))
                if not block:
                    return False
                received += block
            return True
    except OSError:
        return False


class Unanswered:
    """How long the worker has left a client waiting: connections that hold unread bytes (StuckClients), or, while no
    client is connected, the probes that went unanswered in a row."""

    def __init__(self, probe, every, probe_timeout):
        self.probe, self.every, self.probe_timeout = probe, every, probe_timeout
        self.probed_at, self.since = None, None  # the last probe; when the first of the unanswered ones in a row began

    def observe(self, clients, connected, now):
        """The seconds a client has waited at `now`: clients is StuckClients after its observe(), connected whether any
        client holds an established connection to the port."""
        if connected:
            self.since = None  # its own wait is measured by the connection
            return clients.longest_wait(now)
        # every `every` seconds, and at each look while unanswered (to see it answer again)
        if self.probed_at is None or now - self.probed_at >= self.every or self.since is not None:
            self.probed_at = now
            if self.probe():
                self.since = None
            elif self.since is None:
                self.since = now - self.probe_timeout  # it waited that long for its answer
        return 0.0 if self.since is None else now - self.since


def publish(path, waited, at):
    if not path:
        return
    with open(path + ".tmp", "w") as handle:
        json.dump({"waited_seconds": round(waited, 1), "at": round(at, 1)}, handle)
    os.replace(path + ".tmp", path)


def connections(port):
    """The kernel's socket table for the worker's port, established connections (ss, netlink: this host's namespace):
    its text, for parse_waiting, and whether it lists any."""
    listed = subprocess.run(["ss", "-H", "-t", "-i", "-n", "state", "established", "( sport = :%d )" % port],
                            capture_output=True, text=True, check=True).stdout
    return listed, any(line.strip() and not line[0].isspace() for line in listed.splitlines())


def main(environ=None):
    environ = os.environ if environ is None else environ
    unit = environ["WATCHDOG_UNIT"]  # the worker instance's systemd unit
    port = int(environ["RPC_WORKER_PORT"])
    timeout = float(environ["WATCHDOG_TIMEOUT"])  # longer than the worker's longest pause in reading (a cache write)
    interval = float(environ["WATCHDOG_INTERVAL"])
    backoff_max = float(environ.get("WATCHDOG_BACKOFF_MAX", "300"))
    log("watching %s (port %d): restart it when a client's request sits unread, with nothing new received, for %gs"
        % (unit, port, timeout))
    host = environ.get("RPC_WORKER_HOST", "127.0.0.1")
    probe_timeout = float(environ.get("PROBE_TIMEOUT", "3"))
    answer_file = environ.get("ANSWER_FILE", "")
    backoff, clients = interval, StuckClients(timeout)
    unanswered = Unanswered(lambda: answers(host, port, probe_timeout), float(environ.get("PROBE_EVERY", "60")), probe_timeout)
    while True:
        time.sleep(interval)
        listed, connected = connections(port)
        waiting = parse_waiting(listed)
        now = time.monotonic()
        stuck = clients.observe(waiting, now)
        publish(answer_file, unanswered.observe(clients, connected, now), time.time())
        if not stuck:
            if not waiting:
                backoff = interval
            continue
        peer, unread, waited = max(stuck, key=lambda item: item[2])
        log("%s has left a client's %d bytes unread, with nothing new received, for %.0fs (a connection from %s): it "
            "is waiting on a connection whose master is gone (the path to it dropped packets while the master "
            "restarted) or it is frozen. "
            "Killing it (systemd starts it again); the next kill comes %.0fs after this one at the earliest."
            % (unit, unread, waited, peer, backoff))
        subprocess.run(["systemctl", "kill", "--signal=SIGKILL", unit], check=False)
        time.sleep(backoff)
        backoff = min(backoff * 2, backoff_max)
        clients.forget()


if __name__ == "__main__":
    sys.exit(main())
