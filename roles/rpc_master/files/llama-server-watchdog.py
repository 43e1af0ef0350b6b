# Installed by the graviton.llama_rpc collection (role rpc_master): a deploy overwrites changes made here.
"""Restarts llama-server when it has requests to serve and makes no progress, so that no client waits without end.

llama.cpp's RPC client has no timeouts: when a worker stalls (a frozen process, a network path that drops every
packet, a host that hangs), llama-server waits on that worker's socket for ever, and so does every request. Its
HTTP threads still answer, /metrics included. So the sign of a stall is in those figures (llama_rpc_server_state.py):
requests are being processed (llamacpp:requests_processing > 0) and the count of decode steps
(llamacpp:n_decode_total) has not moved for the timeout. A /metrics that gets no answer within the timeout counts as
stuck too.

Then this restarts llama-server (systemd stops it, killing it after TimeoutStopSec), which closes every client's
connection; requests made while it loads get an immediate error. It waits between restarts, doubling the wait while
the server stays stuck (back-off), so a worker that stays down costs a restart now and then, not a restart loop.
The restart never overrides a person or a deploy: it is a try-restart (nothing when the server was stopped) that
fails rather than cancel a stop already under way (--job-mode=fail), and is skipped when the server was restarted
since the figures were read (another invocation). Settings come from the environment (the unit's Environment lines).
The idle stop is a program of its own (llama-server-idle-stop.py).
"""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_rpc_server_state import STUCK, Server  # noqa: E402  pylint: disable=wrong-import-position

HEALTHY, PENDING, RESTART = "healthy", "pending", "restart"  # Stall.observe()


def log(message):
    print(message, flush=True)


class Stall:
    """Whether llama-server has had requests and no decode step for the timeout."""

    def __init__(self, timeout, now):
        self.timeout, self.steps, self.since = timeout, None, now

    def observe(self, seen, now):
        """seen: Server.figures()'s figures, None (not running, starting or loading: nothing to watch yet) or STUCK.
        HEALTHY (idle, or a new step), PENDING (busy, no new step yet within the timeout) or RESTART."""
        if seen is None:
            self.steps, self.since = None, now
            return PENDING
        if seen != STUCK:
            if not seen["busy"] or seen["steps"] != self.steps:  # idle, or moving
                self.steps, self.since = seen["steps"], now
                return HEALTHY
            if now - self.since < self.timeout:
                return PENDING
        return RESTART

    def waited(self, now):
        return now - self.since

    def forget(self, now):
        self.steps, self.since = None, now


def restart(server, watched):
    """Restarts the server that was watched, unless someone stopped or restarted it meanwhile: a replacing restart
    would cancel their stop job (seen: a deploy's stop failed with "Job for llama-server.service canceled")."""
    if server.invocation() != watched:
        log("%s was stopped or restarted meanwhile: not restarting it" % server.unit)
        return False
    done = subprocess.run(["systemctl", "try-restart", "--job-mode=fail", server.unit], check=False,
                          capture_output=True, text=True)
    if done.returncode != 0:
        log("not restarted (%s): %s" % (done.returncode, done.stderr.strip()))
    return done.returncode == 0


def main(environ=None):
    environ = os.environ if environ is None else environ
    timeout = float(environ["WATCHDOG_TIMEOUT"])  # longer than the longest decode step of the model
    interval = float(environ["WATCHDOG_INTERVAL"])
    backoff_max = float(environ.get("WATCHDOG_BACKOFF_MAX", "300"))
    server = Server(environ["WATCHDOG_URL"], environ["WATCHDOG_UNIT"], timeout, environ.get("LLAMA_API_KEY", ""))
    log("watching %s (%s): restart when it serves requests without a decode step for %gs" % (server.unit, server.url, timeout))
    backoff, stall = interval, Stall(timeout, time.monotonic())
    while True:
        time.sleep(interval)
        now = time.monotonic()
        watched = server.invocation()
        verdict = stall.observe(server.figures() if watched else None, now)
        if verdict == HEALTHY:
            backoff = interval
        if verdict != RESTART:
            continue
        log("%s has had requests and no decode step for %.0fs (or gave no figures): it is stuck, most likely on a "
            "worker that stalls (a frozen process or a path that drops packets). Restarting it; the next restart "
            "comes %.0fs after this one at the earliest." % (server.unit, stall.waited(now), backoff))
        if restart(server, watched):
            time.sleep(backoff)
            backoff = min(backoff * 2, backoff_max)
        stall.forget(time.monotonic())


if __name__ == "__main__":
    sys.exit(main())
