# Installed by the graviton.llama_rpc collection (role rpc_master): a deploy overwrites changes made here.
"""Restarts llama-server when it has requests to serve and makes no progress, so that no client waits without end;
and, when asked to, stops the cluster once llama-server has served no request for a while (the idle stop).

llama.cpp's RPC client has no timeouts: when a worker stalls (a frozen process, a network path that drops every
packet, a host that hangs), llama-server waits on that worker's socket for ever, and so does every request. Its
HTTP threads still answer, /metrics included (measured: it answers at once with the figures of the last finished
step). So the sign of a stall is in those figures: requests are being processed (llamacpp:requests_processing > 0)
and the count of decode steps (llamacpp:n_decode_total) has not moved for the timeout. A /metrics that gets no
answer within the timeout counts as stuck too.

Then this restarts llama-server (systemd stops it, killing it after TimeoutStopSec), which closes every client's
connection; requests made while it loads get an immediate error. It waits between restarts, doubling the wait while
the server stays stuck (back-off), so a worker that stays down costs a restart now and then, not a restart loop.
The restart never overrides a person or a deploy: it is a try-restart (nothing when the server was stopped) that
fails rather than cancel a stop already under way (--job-mode=fail), and is skipped when the server was restarted
since the figures were read (another invocation).

The idle stop reads the same figures: the cluster is idle while no request is processed or deferred and the counters
of served work (decode steps, prompt and predicted tokens) stay as they were; /health and /metrics, the gateway's
checks included, move none of them. Once idle for IDLE_STOP_AFTER seconds it writes the figures it read to the journal
and stops the cluster: on AWS (IDLE_STOP_DRIVER=aws) the running instances that carry the cluster's tag, with the
instance profile's permission (StopInstances on that tag alone); elsewhere (services) llama-server, so that the
workers free its weights. Never while a deploy holds the cluster (IDLE_STOP_HOLD exists: a deploy writes it first and
removes it last), never while the server starts, loads or stops, and the clock starts again at each restart.
Settings come from the environment (the unit's Environment lines).
"""

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

STUCK = "stuck"  # figures(): /metrics gave no answer within the timeout
HEALTHY, PENDING, RESTART = "healthy", "pending", "restart"  # Stall.observe()


def log(message):
    print(message, flush=True)


def parse_show(shown):
    """The invocation id in `systemctl show --property=ActiveState,InvocationID` output, or None when the unit is not
    active (stopped, starting, stopping)."""
    state = dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)
    if state.get("ActiveState") != "active":
        return None
    return state.get("InvocationID") or None


SERVED = ("llamacpp:n_decode_total", "llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total",
          "llamacpp:tokens_predicted_total")  # counters that any served request moves


def parse_metrics(text):
    """From llama-server's /metrics (Prometheus text): busy (requests processed or deferred), steps (decode steps so
    far) and served (the counters of SERVED, by name)."""
    values = dict(line.split(" ", 1) for line in text.splitlines() if line and not line.startswith("#") and " " in line)
    figure = {name: float(values.get(name, 0)) for name in SERVED + ("llamacpp:requests_processing",
                                                                     "llamacpp:requests_deferred")}
    return {"busy": figure["llamacpp:requests_processing"] + figure["llamacpp:requests_deferred"] > 0,
            "steps": figure["llamacpp:n_decode_total"], "served": {name: figure[name] for name in SERVED},
            "processing": figure["llamacpp:requests_processing"], "deferred": figure["llamacpp:requests_deferred"]}


class Stall:
    """Whether llama-server has had requests and no decode step for the timeout."""

    def __init__(self, timeout, now):
        self.timeout, self.steps, self.since = timeout, None, now

    def observe(self, seen, now):
        """seen: parse_metrics's figures, None (not running, starting or loading: nothing to watch yet) or STUCK.
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


class Idle:
    """How long llama-server has served nothing: no request in progress or waiting, the served counters unmoved."""

    def __init__(self, after, now):
        self.after, self.served, self.since, self.held = after, None, now, False

    def observe(self, seen, now, held=False):
        """seen as for Stall.observe; held: a deploy holds the cluster. The seconds idle once they reach the bound,
        else None. Anything but a figure of an idle server (loading, stopped, stuck, a request, a deploy) starts the
        clock again."""
        self.held = held
        if seen is None or seen == STUCK or seen["busy"] or held or seen["served"] != self.served:
            self.served = None if seen is None or seen == STUCK else seen["served"]
            self.since = now
            return None
        return now - self.since if now - self.since >= self.after else None

    def forget(self, now):
        self.served, self.since = None, now


def describe(seen):
    """The figures the idle stop read, for the journal."""
    return "requests_processing %g, requests_deferred %g, %s" % (
        seen["processing"], seen["deferred"],
        ", ".join("%s %g" % (name.split(":", 1)[1], value) for name, value in seen["served"].items()))


def deploy_holds(path, max_age, now_epoch):
    """Whether a deploy holds the cluster: its hold file is there and younger than max_age seconds (an older one was
    left by a deploy that died before its end)."""
    try:
        return now_epoch - os.stat(path).st_mtime < max_age
    except OSError:
        return False


def stop_services(server):
    """Stops llama-server (the workers free its weights when its connections close); not when someone else stopped or
    restarted it meanwhile."""
    done = subprocess.run(["systemctl", "stop", "--job-mode=fail", server.unit], check=False, capture_output=True,
                          text=True)
    if done.returncode != 0:
        log("not stopped (%s): %s" % (done.returncode, done.stderr.strip()))
    return done.returncode == 0


def stop_instances(region, tag, cluster, ec2=None):
    """Stops the running instances that carry the cluster's tag (tag=cluster): one StopInstances call for all, this
    master among them. The ids stopped, for the journal."""
    if ec2 is None:
        import boto3  # python3-boto3, installed by the role when the idle stop runs on AWS
        ec2 = boto3.client("ec2", region_name=region)
    found = ec2.describe_instances(Filters=[{"Name": "tag:" + tag, "Values": [cluster]},
                                            {"Name": "instance-state-name", "Values": ["pending", "running"]}])
    ids = sorted(instance["InstanceId"] for reservation in found["Reservations"] for instance in reservation["Instances"])
    if ids:
        ec2.stop_instances(InstanceIds=ids)
    return ids


class Server:
    """The llama-server unit and its /metrics, as systemd and HTTP show them."""

    def __init__(self, url, unit, timeout, api_key):
        self.url, self.unit, self.timeout, self.api_key = url, unit, timeout, api_key

    def invocation(self):
        return parse_show(subprocess.run(["systemctl", "show", self.unit, "--property=ActiveState,InvocationID"],
                                         check=False, capture_output=True, text=True).stdout)

    def restart(self, watched):
        """Restarts the server that was watched, unless someone stopped or restarted it meanwhile: a replacing restart
        would cancel their stop job (seen: a deploy's stop failed with "Job for llama-server.service canceled")."""
        if self.invocation() != watched:
            log("%s was stopped or restarted meanwhile: not restarting it" % self.unit)
            return False
        done = subprocess.run(["systemctl", "try-restart", "--job-mode=fail", self.unit], check=False,
                              capture_output=True, text=True)
        if done.returncode != 0:
            log("not restarted (%s): %s" % (done.returncode, done.stderr.strip()))
        return done.returncode == 0

    def figures(self):
        """parse_metrics of /metrics; None while the server cannot say (starting, loading, stopping: clients get an
        error at once then); STUCK when /metrics gets no answer within the timeout."""
        request = urllib.request.Request(self.url + "/metrics",
                                         headers={"Authorization": "Bearer " + self.api_key} if self.api_key else {})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                text = reply.read().decode("utf-8", "replace")
        except urllib.error.HTTPError:
            return None  # 503 while loading
        except urllib.error.URLError as error:
            return STUCK if isinstance(error.reason, TimeoutError) else None  # refused: starting or stopping
        except TimeoutError:
            return STUCK  # connected, and no answer in time
        except OSError:
            return None  # reset: stopping
        return parse_metrics(text)


def idle_stopper(environ, server):
    """(Idle, stop): the idle stop as the environment sets it, or (None, None) when it is off."""
    after = float(environ.get("IDLE_STOP_AFTER", "0"))
    if after <= 0:
        return None, None
    if environ.get("IDLE_STOP_DRIVER", "services") == "aws":
        region, tag, cluster = environ["IDLE_STOP_REGION"], environ["IDLE_STOP_TAG"], environ["IDLE_STOP_CLUSTER"]

        def stop():
            ids = stop_instances(region, tag, cluster)
            log("stopping the instances tagged %s=%s in %s: %s" % (tag, cluster, region, ", ".join(ids) or "none running"))
            return True
        what = "the instances tagged %s=%s in %s" % (tag, cluster, region)
    else:
        def stop():
            return stop_services(server)
        what = server.unit
    log("idle stop: %s once llama-server has served no request for %gs" % (what, after))
    return Idle(after, time.monotonic()), stop


def main(environ=None):
    environ = os.environ if environ is None else environ
    timeout = float(environ["WATCHDOG_TIMEOUT"])  # longer than the longest decode step of the model; 0: no restarts
    interval = float(environ["WATCHDOG_INTERVAL"])
    backoff_max = float(environ.get("WATCHDOG_BACKOFF_MAX", "300"))
    hold, hold_max = environ.get("IDLE_STOP_HOLD", ""), float(environ.get("IDLE_STOP_HOLD_MAX", "43200"))
    server = Server(environ["WATCHDOG_URL"], environ["WATCHDOG_UNIT"], timeout or interval, environ.get("LLAMA_API_KEY", ""))
    if timeout > 0:
        log("watching %s (%s): restart when it serves requests without a decode step for %gs" % (server.unit, server.url, timeout))
    idle, stop_cluster = idle_stopper(environ, server)
    backoff, stall = interval, Stall(timeout, time.monotonic())
    while True:
        time.sleep(interval)
        now = time.monotonic()
        watched = server.invocation()
        seen = server.figures() if watched else None
        if idle is not None:
            was_held, held = idle.held, bool(hold) and deploy_holds(hold, hold_max, time.time())
            if held != was_held:
                log("a deploy holds the cluster (%s): no idle stop until it ends" % hold if held else
                    "no deploy holds the cluster: the idle clock runs")
            idle_for = idle.observe(seen, now, held)
            if idle_for is not None:
                log("llama-server has served no request for %.0fs (%s): stopping the cluster" % (idle_for, describe(seen)))
                if server.invocation() == watched and stop_cluster():
                    time.sleep(interval)
                idle.forget(time.monotonic())
                continue
        if timeout <= 0:
            continue
        verdict = stall.observe(seen, now)
        if verdict == HEALTHY:
            backoff = interval
        if verdict != RESTART:
            continue
        log("%s has had requests and no decode step for %.0fs (or gave no figures): it is stuck, most likely on a "
            "worker that stalls (a frozen process or a path that drops packets). Restarting it; the next restart "
            "comes %.0fs after this one at the earliest." % (server.unit, stall.waited(now), backoff))
        if server.restart(watched):
            time.sleep(backoff)
            backoff = min(backoff * 2, backoff_max)
        stall.forget(time.monotonic())


if __name__ == "__main__":
    sys.exit(main())
