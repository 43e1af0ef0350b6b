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
Settings come from the environment; the port from the instance's settings file.
"""

import os
import subprocess
import sys
import time


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


def waiting_connections(port):
    """parse_waiting of the kernel's socket table for the worker's port (ss, netlink: this host's network namespace)."""
    return parse_waiting(subprocess.run(["ss", "-H", "-t", "-i", "-n", "state", "established", "( sport = :%d )" % port],
                                        capture_output=True, text=True, check=True).stdout)


def main(environ=None):
    environ = os.environ if environ is None else environ
    unit = environ["WATCHDOG_UNIT"]  # the worker instance's systemd unit
    port = int(environ["RPC_WORKER_PORT"])
    timeout = float(environ["WATCHDOG_TIMEOUT"])  # longer than the worker's longest pause in reading (a cache write)
    interval = float(environ["WATCHDOG_INTERVAL"])
    backoff_max = float(environ.get("WATCHDOG_BACKOFF_MAX", "300"))
    log("watching %s (port %d): restart it when a client's request sits unread, with nothing new received, for %gs"
        % (unit, port, timeout))
    backoff, clients = interval, StuckClients(timeout)
    while True:
        time.sleep(interval)
        waiting = waiting_connections(port)
        stuck = clients.observe(waiting, time.monotonic())
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
