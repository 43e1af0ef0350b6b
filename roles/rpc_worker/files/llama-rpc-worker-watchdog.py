# Installed by the graviton.llama_rpc collection (role rpc_worker): a deploy overwrites changes made here.
"""Restarts an RPC worker that leaves a client waiting: one whose request has sat unread for the timeout, or one
that has accepted no connection for the timeout while clients waited to be accepted.

llama.cpp's RPC worker serves one client at a time, reads it without a timeout, and sets no TCP keepalive. When the
path to the master drops every packet for a minute or two, the master's llama-server is restarted (its watchdog) and
the master's kernel gives up the old connection without the worker hearing of it. The worker then waits on that dead
connection for ever, and the new llama-server's connection waits behind it, its greeting unread: no client is served
again until someone restarts the worker (measured: make bench-faults). A frozen or deadlocked worker looks the same.

So there are two signs, and either restarts it:
- a connection to the worker's port that is established, holds bytes the worker has not read, and has received
  nothing new for TIMEOUT seconds: its client waits for an answer that does not come (one being served, or one queued
  behind a connection the worker waits on for ever). A client being served sends its next command after each answer.
  Counting the unread bytes alone is not enough: a busy worker on starved cores can hold one more command of the same
  size, a reused graph's, at every look while it answers them all, as make bench-faults shows with a compile beside
  the serving cluster.
- no connection accepted (the kernel gives an accepted socket an inode), the port listening, and for TIMEOUT seconds
  connections waiting in its queue (the kernel's
  count of connections not yet accepted, on the listening socket) or probes unanswered: a frozen worker with no
  client, which every new client (a restarted llama-server, its start waiting for the workers) finds silent. A worker
  that serves a client accepts nobody else by design: then only the first sign counts. A port that does not listen
  (the worker starting, its cache checked first) is systemd's to handle, not this.
Then this kills the worker, which closes every connection, and systemd starts it again (Restart=always: a kill, not a
stop, so this watchdog, which is stopped and restarted with the worker, keeps its back-off); the master's llama-server
restarts and loads again.

It also says, at each look, how long a client has waited for an answer (ANSWER_FILE, JSON: "waited_seconds" and "at",
read by role monitoring's figures for its alert on a worker that does not answer): the longest a connection has held
unread bytes with nothing new received; and while no client is being served, since a probe of the port
(HELLO, answered within PROBE_TIMEOUT seconds: the worker logs each connection) first went unanswered. It probes at
most every PROBE_EVERY seconds while the worker answers, and at each look while it does not or while a connection
waits in its queue. Settings come from the environment; the address and port from the instance's settings file.
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


def parse_connections(listed):
    """{peer address:port: (unread bytes, bytes received so far, accepted)} of the connections in `ss -H -t -i -n -e
    state established` output (a socket's line, then its TCP information as key:value words). Accepted: the socket has
    an inode (ino:N, N > 0), which the kernel gives it when a process accepts it; those still in the listening socket's
    queue have none. (Netlink tells this without reading any process's files.)"""
    found, socket = {}, None
    for line in listed.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():  # Recv-Q Send-Q Local:Port Peer:Port ino:N sk:... (with -e)
            fields = line.split()
            inode = next((word[4:] for word in fields if word.startswith("ino:")), "0")
            socket = ((fields[3], int(fields[0]), inode.isdigit() and int(inode) > 0)
                      if len(fields) >= 4 and fields[0].isdigit() else None)
        elif socket is not None:  # the socket's TCP information, key:value words
            info = dict(word.split(":", 1) for word in line.split() if ":" in word)
            peer, unread, accepted = socket
            found[peer] = (unread, int(info.get("bytes_received", "0")), accepted)
            socket = None
    return found


def waiting_answers(found):
    """{peer: (unread bytes, bytes received)} of the connections that hold unread bytes (parse_connections' answer),
    accepted or still in the queue: the clients that wait for the worker to read them."""
    return {peer: (unread, received) for peer, (unread, received, _accepted) in found.items() if unread > 0}


def parse_queue(listed):
    """(listening, connections waiting to be accepted) from `ss -H -t -n -l` output: a listening socket's Recv-Q is
    its queue's length."""
    queued = [int(line.split()[1]) for line in listed.splitlines() if line.startswith("LISTEN") and line.split()[1].isdigit()]
    return bool(queued), sum(queued)


class StuckClients:
    """Which connections have held the same unread bytes, with nothing new received, for the timeout. A connection
    whose bytes received grow is being served, whatever its unread count (a busy worker on starved cores)."""

    def __init__(self, timeout):
        self.timeout = timeout
        self.since = {}  # peer -> ((unread bytes, bytes received), when first seen with them)

    def observe(self, waiting, now):
        """[(peer, unread bytes, seconds waited)] of the connections stuck at `now`, given waiting_answers' answer."""
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
    """How long the worker has left a client waiting: connections that hold unread bytes (StuckClients), or, while it
    serves no client, the probes that went unanswered in a row."""

    def __init__(self, probe, every, probe_timeout):
        self.probe, self.every, self.probe_timeout = probe, every, probe_timeout
        self.probed_at, self.since = None, None  # the last probe; when the first of the unanswered ones in a row began

    def observe(self, clients, serving, now, queued=0):
        """The seconds a client has waited at `now`: clients is StuckClients after its observe(), serving whether the
        worker holds an established connection (it accepts nobody else meanwhile), queued how many connections wait
        in its listening socket's queue (each look probes while one does)."""
        if serving:
            self.since = None  # its own wait is measured by the connection
            return clients.longest_wait(now)
        if self.probed_at is None or now - self.probed_at >= self.every or self.since is not None or queued:
            self.probed_at = now
            if self.probe():
                self.since = None
            elif self.since is None:
                self.since = now - self.probe_timeout  # it waited that long for its answer
        return 0.0 if self.since is None else now - self.since

    def not_accepting(self, now):
        """The seconds probes have gone unanswered in a row while no client was served (0: it answers)."""
        return 0.0 if self.since is None else now - self.since

    def forget(self):
        self.since = None


def publish(path, waited, at):
    if not path:
        return
    with open(path + ".tmp", "w") as handle:
        json.dump({"waited_seconds": round(waited, 1), "at": round(at, 1)}, handle)
    os.replace(path + ".tmp", path)


def connections(port):
    """The kernel's socket table for the worker's port (ss, netlink: this host's namespace): parse_connections' answer
    for its established connections, and parse_queue's for its listening socket."""
    def ss(*arguments):
        return subprocess.run(["ss", "-H", "-t", "-n", *arguments, "( sport = :%d )" % port],
                              capture_output=True, text=True, check=True).stdout
    return parse_connections(ss("-i", "-e", "state", "established")), parse_queue(ss("-l"))


class Watch:
    """One look at the worker's port after another: why to kill it now, or None."""

    def __init__(self, unit, timeout, probe, probe_every, probe_timeout):
        self.unit, self.timeout = unit, timeout
        self.clients = StuckClients(timeout)
        self.unanswered = Unanswered(probe, probe_every, probe_timeout)
        self.waited = 0.0  # how long a client has waited at the last look (the answer file's figure)

    def look(self, found, listening, queued, now):
        """found: parse_connections' answer; listening, queued: parse_queue's. Why to kill the worker, or None."""
        serving = any(accepted for _unread, _received, accepted in found.values())
        stuck = self.clients.observe(waiting_answers(found), now)
        self.waited = self.unanswered.observe(self.clients, serving, now, queued)
        if stuck and serving:
            peer, unread, waited = max(stuck, key=lambda item: item[2])
            return ("%s has left a client's %d bytes unread, with nothing new received, for %.0fs (a connection from "
                    "%s): it is waiting on a connection whose master is gone (the path to it dropped packets while the "
                    "master restarted) or it is frozen." % (self.unit, unread, waited, peer))
        # serving nobody, a client's unread greeting sits in the queue: the same silence the probes find, whichever
        # of the two reaches the timeout first
        queue_wait = max((waited for _peer, _unread, waited in stuck), default=0.0)
        silent = 0.0 if serving or not listening else max(self.unanswered.not_accepting(now), queue_wait)
        if silent >= self.timeout:
            return ("%s has accepted no connection for %.0fs: it serves no client, %d wait in its port's queue and "
                    "probes of the port go unanswered. It is frozen or deadlocked." % (self.unit, silent, queued))
        return None

    def calm(self):
        """Whether nothing waits on the worker now (the back-off between kills starts again)."""
        return self.waited == 0 and not self.clients.since

    def forget(self):
        self.clients.forget()
        self.unanswered.forget()


def main(environ=None):
    environ = os.environ if environ is None else environ
    unit = environ["WATCHDOG_UNIT"]  # the worker instance's systemd unit
    port = int(environ["RPC_WORKER_PORT"])
    timeout = float(environ["WATCHDOG_TIMEOUT"])  # longer than the worker's longest pause in reading (a cache write)
    interval = float(environ["WATCHDOG_INTERVAL"])
    backoff_max = float(environ.get("WATCHDOG_BACKOFF_MAX", "300"))
    log("watching %s (port %d): restart it when a client's request sits unread, with nothing new received, for %gs, "
        "or when it accepts no connection for %gs while clients wait to be accepted" % (unit, port, timeout, timeout))
    host = environ.get("RPC_WORKER_HOST", "127.0.0.1")
    probe_timeout = float(environ.get("PROBE_TIMEOUT", "3"))
    answer_file = environ.get("ANSWER_FILE", "")
    watch = Watch(unit, timeout, lambda: answers(host, port, probe_timeout), float(environ.get("PROBE_EVERY", "60")),
                  probe_timeout)
    backoff = interval
    while True:
        time.sleep(interval)
        found, (listening, queued) = connections(port)
        why = watch.look(found, listening, queued, time.monotonic())
        publish(answer_file, watch.waited, time.time())
        if why is None:
            if watch.calm():
                backoff = interval
            continue
        log("%s Killing it (systemd starts it again); the next kill comes %.0fs after this one at the earliest."
            % (why, backoff))
        subprocess.run(["systemctl", "kill", "--signal=SIGKILL", unit], check=False)
        time.sleep(backoff)
        backoff = min(backoff * 2, backoff_max)
        watch.forget()


if __name__ == "__main__":
    sys.exit(main())
