# Installed by the graviton.llama_rpc collection (role rpc_master): a deploy overwrites changes made here.
"""Stops the cluster once llama-server has served no request for a while (the idle stop), and tells the gateways first.

It reads llama-server's /metrics (llama_rpc_server_state.py): the cluster is idle while no request is processed or
deferred and the counters of served work (decode steps, prompt and predicted tokens) stay as they were; /health and
/metrics, the gateway's checks included, move none of them. Never while a deploy holds the cluster (IDLE_STOP_HOLD
exists: a deploy writes it first and removes it last), never while the server starts, loads or stops, and the clock
starts again at each restart.

Once idle for IDLE_STOP_AFTER seconds it announces the stop (the file idle-stopping in IDLE_STOP_STATE_DIR): the wake
socket (llama-server-wake.py) then answers the gateways' agent checks "down", so a gateway takes the cluster out and
holds the next request for a wake instead of sending it to a server about to stop. It waits until a gateway that checks
has heard it (the wake socket touches gateway-asked at each check), at most IDLE_STOP_ANNOUNCE_SECONDS, and none when no
gateway has checked for a minute. A wake meanwhile (a request at a gateway, with the key) removes the announcement, and
a request seen meanwhile in the figures withdraws it: either way the cluster serves on. Then it writes the figures it
read to the journal and stops the cluster: on AWS (IDLE_STOP_DRIVER=aws) the running instances that carry the cluster's
tag, with the instance profile's permission (StopInstances on that tag alone); elsewhere (services) llama-server, so
that the workers free its weights. llama-server's start removes the announcement. Settings come from the environment
(the unit's Environment lines).
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_rpc_server_state import STUCK, Server  # noqa: E402  pylint: disable=wrong-import-position

GATEWAY_RECENT = 60  # seconds since a gateway's last check within which one counts as listening


def log(message):
    print(message, flush=True)


class Idle:
    """How long llama-server has served nothing: no request in progress or waiting, the served counters unmoved."""

    def __init__(self, after, now):
        self.after, self.served, self.since, self.held = after, None, now, None

    def observe(self, seen, now, held=None):
        """seen: Server.figures()'s figures, None (not running, starting or loading) or STUCK; held: the deploy that holds
        the cluster (deploy_holds()). The seconds idle once they reach the bound, else None. Anything but a figure of an
        idle server (loading, stopped, stuck, a request, a deploy) starts the clock again."""
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
    """Which deploy holds the cluster, in words, or None: its hold file is there and younger than max_age seconds (an
    older one was left by a deploy that was killed). The deploy writes who runs it, from where and since when (JSON)."""
    try:
        if now_epoch - os.stat(path).st_mtime >= max_age:
            return None
        with open(path) as handle:
            text = handle.read()
    except OSError:
        return None
    try:
        who = json.loads(text)
        return "the deploy by %s on %s since %s" % (who["by"], who["controller"], who["since"])
    except (ValueError, KeyError, TypeError):
        return "a deploy (%s)" % (" ".join(text.split())[:80] or "its hold names nobody")


class Announcement:
    """The stop, announced to the gateways before it comes: ANNOUNCED makes the wake socket answer their agent checks
    "down"; the wake socket touches ASKED at each check; a wake (the key) removes ANNOUNCED, which calls the stop off."""
    ANNOUNCED, ASKED = "idle-stopping", "gateway-asked"

    def __init__(self, directory, bound, clock=time.time, sleep=time.sleep):
        self.announced = os.path.join(directory, self.ANNOUNCED)
        self.asked = os.path.join(directory, self.ASKED)
        self.bound, self.clock, self.sleep = bound, clock, sleep

    def _asked_at(self):
        try:
            return os.stat(self.asked).st_mtime
        except OSError:
            return None

    def announce(self):
        """Announces the stop and waits for the gateways: "heard" (a gateway checked since), "nobody" (no gateway has
        checked within GATEWAY_RECENT s: nothing to wait for), "unheard" (none checked within the bound) or "called off"
        (a wake removed the announcement)."""
        began = self.clock()
        with open(self.announced, "w") as handle:
            handle.write("%d\n" % began)
        asked = self._asked_at()
        if asked is None or began - asked > GATEWAY_RECENT:
            return "nobody"
        while True:
            if not os.path.exists(self.announced):
                return "called off"
            asked = self._asked_at()
            if asked is not None and asked > began:
                return "heard"
            if self.clock() - began >= self.bound:
                return "unheard"
            self.sleep(0.2)

    def withdraw(self):
        try:
            os.unlink(self.announced)
        except FileNotFoundError:
            pass


def stop_services(unit):
    """Stops llama-server (the workers free its weights when its connections close); not when someone else stopped or
    restarted it meanwhile."""
    done = subprocess.run(["systemctl", "stop", "--job-mode=fail", unit], check=False, capture_output=True, text=True)
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


def stopper(environ, server):
    """(what is stopped, in words; the call that stops it) as the environment sets it."""
    if environ.get("IDLE_STOP_DRIVER", "services") == "aws":
        region, tag, cluster = environ["IDLE_STOP_REGION"], environ["IDLE_STOP_TAG"], environ["IDLE_STOP_CLUSTER"]

        def stop():
            ids = stop_instances(region, tag, cluster)
            log("stopping the instances tagged %s=%s in %s: %s" % (tag, cluster, region, ", ".join(ids) or "none running"))
            return True
        return "the instances tagged %s=%s in %s" % (tag, cluster, region), stop
    return server.unit, lambda: stop_services(server.unit)


def why_not_stop(outcome, before, after, held, restarted):
    """Why the stop announced is off, in words, from a second look after the announcement (None: stop now). outcome:
    Announcement.announce()'s; before, after: Server.figures() before and after it; held: deploy_holds()'s answer now;
    restarted: whether llama-server was started again meanwhile (another invocation)."""
    if outcome == "called off":
        return "a wake called the stop off (a request at a gateway)"
    if held:
        return "%s began while the stop was announced" % held
    if restarted:
        return "llama-server was started again meanwhile (by someone else): nothing of this idle stop's to stop"
    if after is None:
        return "llama-server stopped or is loading meanwhile (by someone else): nothing of this idle stop's to stop"
    if after == STUCK:
        return "llama-server's figures do not answer now: its watchdog's business, not an idle stop's"
    if after["busy"] or after["served"] != before["served"]:
        return "a request came while the stop was announced (%s)" % describe(after)
    return None


def main(environ=None):
    environ = os.environ if environ is None else environ
    after, interval = float(environ["IDLE_STOP_AFTER"]), float(environ["WATCHDOG_INTERVAL"])
    hold, hold_max = environ.get("IDLE_STOP_HOLD", ""), float(environ.get("IDLE_STOP_HOLD_MAX", "43200"))
    server = Server(environ["WATCHDOG_URL"], environ["WATCHDOG_UNIT"], interval, environ.get("LLAMA_API_KEY", ""))
    announcement = Announcement(environ.get("IDLE_STOP_STATE_DIR", "/run/llama-rpc"),
                                float(environ.get("IDLE_STOP_ANNOUNCE_SECONDS", "10")))
    what, stop = stopper(environ, server)
    log("idle stop: %s once llama-server has served no request for %gs" % (what, after))
    idle = Idle(after, time.monotonic())
    while True:
        time.sleep(interval)
        watched = server.invocation()
        seen = server.figures() if watched else None
        was_held = idle.held
        held = deploy_holds(hold, hold_max, time.time()) if hold else None
        if held != was_held:
            log("%s holds the cluster (%s): no idle stop until it ends" % (held, hold) if held else
                "%s ended: no deploy holds the cluster, the idle clock runs" % was_held)
        idle_for = idle.observe(seen, time.monotonic(), held)
        if idle_for is None:
            continue
        log("llama-server has served no request for %.0fs (%s): stopping the cluster" % (idle_for, describe(seen)))
        outcome = announcement.announce()
        if outcome != "nobody":
            log("the stop announced to the gateways: %s" % outcome)
        # a second look: a deploy, a request or someone else may have come while the gateways were told
        now_watched = server.invocation()
        why = why_not_stop(outcome, seen, server.figures() if now_watched else None,
                           deploy_holds(hold, hold_max, time.time()) if hold else None, now_watched != watched)
        if why is None and stop():
            time.sleep(interval)
        else:
            announcement.withdraw()
            log("not stopped: %s. The cluster serves on." % (why or "the stop failed"))
        idle.forget(time.monotonic())


if __name__ == "__main__":
    sys.exit(main())
