"""The daemons the roles install beside llama.cpp (roles/*/files/*.py), fed what they read on a host: `ss` output and
llama-server's /metrics recorded on this machine (tests/unit/data/daemons, recorded by a real llama-server b11312 and
by loopback sockets that hold unread bytes), `systemctl show` output, and a real tensor cache directory.

The worker watchdog's false alarm is here: a busy worker on starved cores held one 321-byte command unread at every
look while it answered them all (its bytes received grew); a watchdog that counted unread bytes alone killed it."""

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from ansible_collections.graviton.llama_rpc.plugins.filter.split_endpoint import split_endpoint

from tests.tools.llama_cpp import fnv1a64

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data" / "daemons"


def daemon(role, name):
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), ROOT / "roles" / role / "files" / (name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


worker_watchdog = daemon("rpc_worker", "llama-rpc-worker-watchdog")
server_state = daemon("rpc_master", "llama_rpc_server_state")
server_watchdog = daemon("rpc_master", "llama-server-watchdog")
idle_stop = daemon("rpc_master", "llama-server-idle-stop")
cache_guard = daemon("rpc_worker", "llama-rpc-worker-cache-guard")
server_wake = daemon("rpc_master", "llama-server-wake")
gateway_wake_aws = daemon("gateway", "llama-rpc-gateway-wake-aws")

# In the recorded ss output: the client whose command sits unread, the busy worker's client, an idle client.
STUCK, BUSY, IDLE = "127.0.0.1:42206", "127.0.0.1:42216", "127.0.0.1:42228"


def ss(number):
    return (DATA / ("ss-%d.txt" % number)).read_text()


# --- the worker's watchdog -------------------------------------------------------------------------------------------
def waiting(number):
    return worker_watchdog.waiting_answers(worker_watchdog.parse_connections(ss(number)))


def test_the_connections_that_hold_unread_bytes_are_read_from_ss():
    assert waiting(1) == {STUCK: (321, 321), BUSY: (321, 321)}
    assert waiting(3) == {STUCK: (321, 321), BUSY: (321, 963)}
    assert worker_watchdog.parse_connections(ss(1))[IDLE] == (0, 0, False)  # recorded without -e: no inode read
    assert waiting_answers_of("") == {}


def waiting_answers_of(listed):
    return worker_watchdog.waiting_answers(worker_watchdog.parse_connections(listed))


def test_the_kernel_tells_accepted_connections_from_queued_ones_and_counts_the_queue():
    """A real listening socket with a backlog of 1, as the worker's: one connection accepted, two left in the queue
    (one still open with its greeting unread, one its client closed), a third refused when the queue is full. The
    watchdog's own look (ss through connections()) tells which the process holds (an inode), and how many wait."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    served = socket.create_connection(("127.0.0.1", port))
    accepted, _peer = listener.accept()
    served.sendall(b"x" * 10)
    queued = socket.create_connection(("127.0.0.1", port), timeout=2)
    queued.sendall(worker_watchdog.HELLO)
    gone = socket.create_connection(("127.0.0.1", port), timeout=2)
    gone_port = gone.getsockname()[1]
    gone.close()
    time.sleep(0.3)
    try:
        found, (listening, in_queue) = worker_watchdog.connections(port)
        peer = "127.0.0.1:%d"
        assert found[peer % served.getsockname()[1]] == (10, 10, True)
        assert found[peer % queued.getsockname()[1]] == (33, 33, False)
        assert peer % gone_port not in found, "a closed client's connection is not established"
        assert listening and in_queue == 2
        assert not worker_watchdog.answers("127.0.0.1", port, 1), "the queue is full: a probe is not even accepted"
    finally:
        for each in (served, accepted, queued, listener):
            each.close()
    assert worker_watchdog.connections(port) == ({}, (False, 0)), "nothing listens any more"


def test_a_busy_worker_whose_received_bytes_grow_is_never_stuck():
    """The same 321 unread bytes at every look, but bytes received grow: the worker answers them all."""
    clients = worker_watchdog.StuckClients(timeout=300)
    stuck = [clients.observe(waiting(number), now) for number, now in ((1, 0), (2, 200), (3, 400))]
    assert stuck[0] == [] and stuck[1] == []
    assert stuck[2] == [(STUCK, 321, 400)], "the client whose request sat unread for 400 s is the one stuck"
    assert all(peer != BUSY for peer, _unread, _waited in stuck[2])


def test_the_busy_worker_alone_is_never_killed():
    """Its unread count alone never moves (the first version's sign): only bytes received tell it is served."""
    clients = worker_watchdog.StuckClients(timeout=300)
    for look, number in enumerate([1, 2, 3] * 4):
        busy = {peer: seen for peer, seen in waiting(number).items() if peer == BUSY}
        assert busy[BUSY][0] == 321
        assert clients.observe(busy, look * 400) == [], "a served client was taken for a stuck one"


def test_a_stuck_client_is_seen_after_the_timeout_and_forgotten_after_a_kill():
    clients = worker_watchdog.StuckClients(timeout=300)
    first = waiting(1)
    assert clients.observe(first, 0) == []
    assert clients.observe(first, 299) == []
    assert [peer for peer, _unread, _waited in clients.observe(first, 300)] == [STUCK, BUSY]
    clients.forget()
    assert clients.observe(first, 301) == [], "the clock starts again after a kill"
    # a probe that gave up closed its end: it is no longer listed, and so never counted
    assert clients.observe({}, 1000) == []


def test_how_long_a_client_waits_is_what_its_connection_holds_unread_or_what_probes_leave_unanswered():
    clients = worker_watchdog.StuckClients(timeout=300)
    probes = []
    unanswered = worker_watchdog.Unanswered(lambda: probes.append(1) or answering[0], every=60, probe_timeout=3)
    answering = [True]
    # a connected client: its unread bytes' age, no probe
    clients.observe(waiting(1), 0)
    assert unanswered.observe(clients, True, 0) == 0 and probes == []
    clients.observe(waiting(1), 40)
    assert unanswered.observe(clients, True, 40) == 40
    # nobody connected: a probe once a minute while it answers, at each look once it does not
    clients.observe({}, 50)
    assert unanswered.observe(clients, False, 50) == 0 and len(probes) == 1
    assert unanswered.observe(clients, False, 55) == 0 and len(probes) == 1
    answering[0] = False
    assert unanswered.observe(clients, False, 110) == 3 and len(probes) == 2
    assert unanswered.observe(clients, False, 115) == 8 and len(probes) == 3
    answering[0] = True
    assert unanswered.observe(clients, False, 120) == 0


def watch(answering, timeout=300):
    """A worker's watch whose probes answer while answering[0] is true; the probes it made are counted."""
    probes = []
    return worker_watchdog.Watch("llama-rpc-worker@main.service", timeout,
                                 lambda: probes.append(1) or answering[0], 60, 3), probes


SERVED = {"10.0.0.1:40000": (0, 5000, True)}  # the master's connection, accepted, nothing unread
QUEUED = {"10.0.0.1:40002": (33, 33, False)}  # a client's greeting in the queue, not accepted


def test_a_frozen_worker_that_serves_nobody_is_killed_once_probes_go_unanswered_for_the_timeout():
    """The master's restarted llama-server finds the worker silent: its connections wait in the queue (or close), the
    probes go unanswered. Killed after the timeout, not before, and the reason says what was seen."""
    answering = [False]
    watching, probes = watch(answering)
    assert watching.look({}, True, 1, 0) is None and probes == [1], "a connection in the queue: probed at once"
    assert watching.look({}, True, 2, 100) is None and watching.waited == 103
    assert watching.look({}, True, 0, 296) is None, "its clients gave up: the probes still count"
    why = watching.look({}, True, 2, 297)
    assert why.startswith("llama-rpc-worker@main.service has accepted no connection for 300s: it serves no client, "
                          "2 wait in its port's queue and probes of the port go unanswered."), why
    watching.forget()
    assert watching.look({}, True, 0, 298) is None, "the clock starts again after a kill"


def test_a_frozen_worker_whose_queue_holds_a_greeting_is_killed_for_accepting_nobody():
    """llama-server started against a frozen worker: its greeting waits unread in the queue, where the kernel
    accepted it, and the probes go unanswered too. Whichever sign reaches the timeout first, the reason is the one
    that is true: nobody accepted, not a served client left waiting."""
    for probes_silent_from in (0, 200):  # the greeting's wait first, or the probes' silence first
        answering = [True]
        watching, _probes = watch(answering)
        reasons = []
        for now in range(0, 400, 5):
            answering[0] = now < probes_silent_from
            reasons.append(watching.look(QUEUED, True, 1, now))
        why = next(reason for reason in reasons if reason)
        assert why.startswith("llama-rpc-worker@main.service has accepted no connection for 30") and \
            "s: it serves no client, 1 wait in its port's queue" in why, why
        assert reasons.index(why) * 5 == 300, "the greeting waited the timeout: killed then, not before"


def test_a_worker_that_serves_a_client_or_does_not_listen_yet_is_never_killed_for_silence():
    answering = [False]
    watching, probes = watch(answering)
    # serving a load or a stream: it accepts nobody else by design, whatever has come and gone in its queue
    assert all(watching.look(SERVED, True, 2, now) is None for now in range(0, 3000, 100)) and probes == []
    # ... but a client queued behind a connection the worker waits on for ever waits for the timeout, and is seen
    assert watching.look({**SERVED, **QUEUED}, True, 1, 3000) is None
    assert "has left a client's 33 bytes unread" in watching.look({**SERVED, **QUEUED}, True, 1, 3300)
    watching, probes = watch(answering)
    # not listening (starting: its cache checked before it listens): refused probes are systemd's business
    assert all(watching.look({}, False, 0, now) is None for now in range(0, 3000, 100))
    assert watching.waited > 300 and probes, "the alert's figure still says nobody is answered"


def test_a_probe_that_answers_calls_off_the_silence_and_a_queue_alone_is_not_a_fault():
    answering = [True]
    watching, probes = watch(answering)
    for now in range(0, 1000, 5):  # a connection in the queue at each look, accepted as soon as the worker gets to it
        assert watching.look(QUEUED if now % 10 else {}, True, 1 if now % 10 else 0, now) is None
    assert len(probes) > 90, "every look with a queue probes"
    answering[0] = False
    assert watching.look({}, True, 1, 1000) is None and watching.waited == 3
    answering[0] = True
    assert watching.look({}, True, 1, 1200) is None and watching.waited == 0 and watching.calm()


def test_a_probe_is_answered_by_a_worker_that_reads_and_not_by_one_that_does_not():
    """A socket that answers the HELLO as a worker does (36 bytes), and one that accepts and never reads."""
    import threading  # pylint: disable=import-outside-toplevel
    frozen = socket.socket()
    frozen.bind(("127.0.0.1", 0))
    frozen.listen(4)
    answering = socket.socket()
    answering.bind(("127.0.0.1", 0))
    answering.listen(4)

    def serve():
        connection, _peer = answering.accept()
        with connection:
            assert connection.recv(33) == worker_watchdog.HELLO
            connection.sendall(b"\x1c" + bytes(7) + bytes([7, 0, 0, 0]) + bytes(24))
    server = threading.Thread(target=serve, daemon=True)
    server.start()
    assert worker_watchdog.answers("127.0.0.1", answering.getsockname()[1], 3)
    server.join(5)
    began = time.monotonic()
    assert not worker_watchdog.answers("127.0.0.1", frozen.getsockname()[1], 1)
    assert 1 <= time.monotonic() - began < 3
    frozen.close()
    answering.close()
    assert not worker_watchdog.answers("127.0.0.1", 1, 1), "refused: nothing listens"


# --- llama-server's watchdog -----------------------------------------------------------------------------------------
def metrics(name):
    return server_state.parse_metrics((DATA / ("metrics-%s.txt" % name)).read_text())


def test_the_figures_are_read_from_a_real_metrics_page():
    assert {key: metrics("idle")[key] for key in ("busy", "steps", "processing", "deferred")} == {
        "busy": False, "steps": 0.0, "processing": 0.0, "deferred": 0.0}
    assert (metrics("busy-1")["busy"], metrics("busy-1")["steps"]) == (True, 498.0)
    assert (metrics("busy-2")["busy"], metrics("busy-2")["steps"]) == (True, 716.0)
    assert metrics("busy-2")["served"] == {"llamacpp:n_decode_total": 716.0, "llamacpp:prompt_tokens_total": 15.0,
                                           "llamacpp:prompt_tokens_cached_total": 13.0,
                                           "llamacpp:tokens_predicted_total": 498.0}
    assert idle_stop.describe(metrics("busy-2")) == (
        "requests_processing 1, requests_deferred 0, n_decode_total 716, prompt_tokens_total 15, "
        "prompt_tokens_cached_total 13, tokens_predicted_total 498")


def served(figures, **moved):
    """figures with some served counters moved (a request that came and went between two looks)."""
    return dict(figures, served=dict(figures["served"], **{"llamacpp:" + name: value for name, value in moved.items()}))


# --- the wake socket ------------------------------------------------------------------------------------------------
FAKE_SYSTEMCTL = """
import json, sys
with open(sys.argv[1], "a") as calls:
    calls.write(json.dumps(sys.argv[2:]) + "\\n")
print("inactive" if sys.argv[2] == "is-active" else "")
"""


def wake(tmp_path, sent, key="the-key"):
    """What the wake answers a client that sent `sent`, the systemctl calls it made and its journal lines."""
    import io  # pylint: disable=import-outside-toplevel
    calls = tmp_path / "calls"
    calls.write_text("")
    answer = io.BytesIO()
    environ = {"LLAMA_API_KEY": key, "REMOTE_ADDR": "10.0.0.9", "WAKE_UNITS": "llama-server.service llama-server-watchdog.service"}
    code = server_wake.main(environ, io.BytesIO(sent), answer, (sys.executable, "-c", FAKE_SYSTEMCTL, str(calls)))
    return code, answer.getvalue(), [json.loads(line) for line in calls.read_text().splitlines()]


def test_the_wake_starts_llama_server_for_its_key_only(tmp_path, capsys):
    assert wake(tmp_path, b"the-key\n") == (0, b"starting inactive\n", [
        ["is-active", "llama-server.service"], ["start", "--no-block", "llama-server.service", "llama-server-watchdog.service"]])
    assert wake(tmp_path, b"the-key\r\n")[0] == 0
    for wrong in (b"not-the-key\n", b"the-key-and-more\n", b"\n", b"", b"x" * 5000):
        assert wake(tmp_path, wrong) == (1, b"refused\n", []), wrong[:20]
    assert wake(tmp_path, b"\n", key="") == (1, b"refused\n", []), "an empty key opens nothing"
    journal = capsys.readouterr().err
    assert "a wake from 10.0.0.9: starting llama-server.service llama-server-watchdog.service (llama-server.service was inactive)" in journal
    assert "refused a wake from 10.0.0.9: not llama-server's key" in journal and "the-key" not in journal


class Health:
    """llama-server's /health on loopback, as it answers: 503 "Loading model" while it loads, then 200."""

    def __init__(self):
        import http.server  # pylint: disable=import-outside-toplevel
        import threading  # pylint: disable=import-outside-toplevel
        self.status = 503
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802  (http.server's name)
                body = b'{"status":"ok"}' if outer.status == 200 else b'{"error":{"code":503,"message":"Loading model"}}'
                self.send_response(outer.status if self.path == "/health" else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args):
                pass
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/health" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_the_wake_answers_the_gateways_agent_check_up_only_while_llama_server_serves(tmp_path, capsys):
    """"state" (HAProxy's agent-send): up while llama-server's unit is active, no stop is announced and its /health
    answers 200; down while it loads (503), stops or is stopped. Each check is noted for the idle stop, none written to
    the journal, and nothing started."""
    import io  # pylint: disable=import-outside-toplevel
    calls = tmp_path / "calls"
    health = Health()

    def check(active, url=health.url):
        calls.write_text("")
        answer = io.BytesIO()
        systemctl = (sys.executable, "-c", FAKE_SYSTEMCTL.replace('"inactive"', '"%s"' % active), str(calls))
        code = server_wake.main({"LLAMA_API_KEY": "the-key", "WAKE_STATE_DIR": str(tmp_path), "WAKE_HEALTH_URL": url},
                                io.BytesIO(b"state\n"), answer, systemctl)
        return code, answer.getvalue(), [json.loads(line)[0] for line in calls.read_text().splitlines()]
    try:
        assert check("active") == (0, b"down\n", ["is-active"]), "loading its model: not yet"
        assert (tmp_path / "gateway-asked").exists()
        health.status = 200
        assert check("active") == (0, b"up\n", ["is-active"])
        assert check("inactive") == (0, b"down\n", ["is-active"])
        assert check("active", url="http://127.0.0.1:1/health") == (0, b"down\n", ["is-active"]), "nothing answers"
        (tmp_path / "idle-stopping").write_text("1\n")
        assert check("active") == (0, b"down\n", ["is-active"]), "an announced idle stop takes the cluster out"
    finally:
        health.close()
    assert capsys.readouterr().err == ""


def test_a_wake_calls_off_an_announced_idle_stop(tmp_path, capsys):
    import io  # pylint: disable=import-outside-toplevel
    (tmp_path / "idle-stopping").write_text("1\n")
    calls = tmp_path / "calls"
    calls.write_text("")
    environ = {"LLAMA_API_KEY": "the-key", "REMOTE_ADDR": "10.0.0.9", "WAKE_STATE_DIR": str(tmp_path)}
    assert server_wake.main(dict(environ, LLAMA_API_KEY="other"), io.BytesIO(b"the-key\n"), io.BytesIO(),
                            (sys.executable, "-c", FAKE_SYSTEMCTL, str(calls))) == 1
    assert (tmp_path / "idle-stopping").exists(), "a refused wake calls nothing off"
    assert server_wake.main(environ, io.BytesIO(b"the-key\n"), io.BytesIO(),
                            (sys.executable, "-c", FAKE_SYSTEMCTL, str(calls))) == 0
    assert not (tmp_path / "idle-stopping").exists()
    assert "a wake from 10.0.0.9 called off the idle stop announced to the gateways" in capsys.readouterr().err


# --- the idle stop ---------------------------------------------------------------------------------------------------
class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def time(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_the_stop_is_announced_to_the_gateways_and_waits_until_one_has_heard(tmp_path):
    clock = Clock()
    announcement = idle_stop.Announcement(str(tmp_path), 10, clock.time, clock.sleep)
    asked = tmp_path / "gateway-asked"
    # no gateway checks: nothing to wait for
    assert announcement.announce() == "nobody" and (tmp_path / "idle-stopping").exists()
    announcement.withdraw()
    assert not (tmp_path / "idle-stopping").exists()
    # a gateway that checked 30 s ago and checks again 2 s after the announcement
    asked.write_text("")
    os.utime(asked, (clock.now - 30, clock.now - 30))

    def sleep_until_checked(seconds):
        clock.sleep(seconds)
        if clock.now >= began + 2:
            os.utime(asked, (clock.now, clock.now))
    began = clock.now
    announcement = idle_stop.Announcement(str(tmp_path), 10, clock.time, sleep_until_checked)
    assert announcement.announce() == "heard" and 2 <= clock.now - began < 3
    # a gateway that stopped checking: the wait ends at the bound
    os.utime(asked, (clock.now - 5, clock.now - 5))
    began = clock.now
    assert idle_stop.Announcement(str(tmp_path), 10, clock.time, clock.sleep).announce() == "unheard"
    assert 10 <= clock.now - began < 11


def test_a_wake_while_the_stop_is_announced_calls_it_off(tmp_path):
    clock = Clock()
    asked = tmp_path / "gateway-asked"
    asked.write_text("")
    os.utime(asked, (clock.now - 1, clock.now - 1))

    def wake_after_a_second(seconds):
        clock.sleep(seconds)
        if clock.now - began >= 1:
            (tmp_path / "idle-stopping").unlink(missing_ok=True)  # what llama-server-wake.py does with the key
    began = clock.now
    assert idle_stop.Announcement(str(tmp_path), 10, clock.time, wake_after_a_second).announce() == "called off"


def test_the_idle_stop_looks_again_after_the_announcement_and_says_what_it_saw():
    quiet, deploy = metrics("idle"), "the deploy by ci on runner-7 since 2026-12-06T07:00:00Z"
    assert idle_stop.why_not_stop("heard", quiet, quiet, None, False) is None
    assert idle_stop.why_not_stop("nobody", quiet, quiet, None, False) is None
    assert idle_stop.why_not_stop("called off", quiet, quiet, None, False).startswith("a wake called the stop off")
    assert idle_stop.why_not_stop("heard", quiet, quiet, deploy, False) == deploy + " began while the stop was announced"
    assert idle_stop.why_not_stop("heard", quiet, served(quiet, n_decode_total=9.0), None, False).startswith(
        "a request came while the stop was announced (requests_processing 0, requests_deferred 0, ")
    assert idle_stop.why_not_stop("heard", quiet, dict(quiet, busy=True), None, False).startswith("a request came")
    # llama-server gone or started again by someone else: not "a request came"
    assert idle_stop.why_not_stop("heard", quiet, None, None, False).startswith("llama-server stopped or is loading meanwhile")
    assert idle_stop.why_not_stop("heard", quiet, quiet, None, True).startswith("llama-server was started again meanwhile")
    assert idle_stop.why_not_stop("heard", quiet, server_state.STUCK, None, False).startswith("llama-server's figures do not")


def test_the_idle_stop_comes_after_the_bound_of_nothing_served_and_not_before():
    idle = idle_stop.Idle(after=600, now=0)
    quiet = metrics("idle")
    assert idle.observe(quiet, 5) is None  # the first figures start the clock
    assert all(idle.observe(quiet, now) is None for now in range(10, 605, 5))
    assert idle.observe(quiet, 605) == 600


def test_a_request_in_progress_or_waiting_keeps_the_cluster_up_however_long_it_streams():
    idle = idle_stop.Idle(after=60, now=0)
    streaming = metrics("busy-1")
    # the same figures for an hour (a decode step of minutes, or a slow reader): busy is enough
    assert all(idle.observe(streaming, now) is None for now in range(0, 3600, 5))
    waiting = dict(metrics("idle"), busy=True, deferred=1.0)
    assert all(idle.observe(waiting, now) is None for now in range(3600, 3700, 5))
    # it ends: the clock starts when it is last seen, not at its start
    done = served(metrics("idle"), n_decode_total=500.0)
    assert idle.observe(done, 3700) is None
    assert idle.observe(done, 3755) is None and idle.observe(done, 3760) == 60


def test_a_request_that_came_and_went_between_two_looks_counts_as_served():
    idle = idle_stop.Idle(after=60, now=0)
    before = metrics("idle")
    assert idle.observe(before, 0) is None and idle.observe(before, 55) is None
    # a short request between the looks: only a counter moved (no look saw it in progress)
    assert idle.observe(served(before, tokens_predicted_total=3.0, n_decode_total=3.0), 58) is None
    assert idle.observe(served(before, tokens_predicted_total=3.0, n_decode_total=3.0), 117) is None
    # a prompt answered from the cache alone moves its own counter
    assert idle.observe(served(before, tokens_predicted_total=3.0, n_decode_total=3.0, prompt_tokens_cached_total=9.0), 118) is None
    assert idle.observe(served(before, tokens_predicted_total=3.0, n_decode_total=3.0, prompt_tokens_cached_total=9.0), 178) == 60


def test_a_deploy_a_restart_or_no_figures_start_the_clock_again():
    idle = idle_stop.Idle(after=60, now=0)
    quiet = metrics("idle")
    assert idle.observe(quiet, 0) is None
    assert idle.observe(quiet, 50, held="a deploy") is None and idle.held  # a deploy began
    assert idle.observe(quiet, 500, held="a deploy") is None  # it fetches for long
    # it ended between the looks at 500 and 510: the clock runs from the last look that saw it
    assert idle.observe(quiet, 510) is None and idle.observe(quiet, 559) is None and not idle.held
    assert idle.observe(quiet, 560) == 60
    idle.forget(570)
    for nothing in (None, server_state.STUCK):  # restarting or loading (None), or /metrics gave no answer
        assert idle.observe(quiet, 600) is None and idle.observe(nothing, 655) is None
        assert idle.observe(quiet, 700) is None and idle.observe(quiet, 759) is None and idle.observe(quiet, 760) == 60
        idle.forget(760)


def test_a_deploys_hold_counts_until_it_is_older_than_its_bound(tmp_path):
    hold = tmp_path / "deploy.hold"
    assert idle_stop.deploy_holds(str(hold), 43200, time.time()) is None
    hold.write_text('{"by": "ci", "controller": "runner-7", "since": "2026-12-06T07:00:00Z"}')  # as plan.yml writes it
    assert idle_stop.deploy_holds(str(hold), 43200, time.time()) == "the deploy by ci on runner-7 since 2026-12-06T07:00:00Z"
    assert idle_stop.deploy_holds(str(hold), 43200, time.time() + 43201) is None, "left by a deploy that was killed"
    hold.write_text("master\n")  # an older deploy's hold: its text
    assert idle_stop.deploy_holds(str(hold), 43200, time.time()) == "a deploy (master)"


@pytest.fixture(name="ec2")
def fixture_ec2():
    """EC2 in moto, and launch(tags): a new instance's id."""
    moto = pytest.importorskip("moto")  # the lowest ansible-core's venv has no moto
    import boto3  # pylint: disable=import-outside-toplevel
    with pytest.MonkeyPatch.context() as patch, moto.mock_aws():
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        client = boto3.client("ec2", region_name="eu-west-1")
        image = client.describe_images(Owners=["amazon"], MaxResults=1)["Images"][0]["ImageId"]

        def launch(tags):
            spec = [{"ResourceType": "instance", "Tags": [{"Key": key, "Value": value} for key, value in tags.items()]}]
            return client.run_instances(ImageId=image, InstanceType="c8g.large", MinCount=1, MaxCount=1,
                                        **({"TagSpecifications": spec} if tags else {}))["Instances"][0]["InstanceId"]

        def states():
            return {instance["InstanceId"]: instance["State"]["Name"]
                    for reservation in client.describe_instances()["Reservations"] for instance in reservation["Instances"]}
        yield SimpleNamespace(client=client, launch=launch, states=states)


class Counting:
    """An EC2 client that notes the calls made through it."""

    def __init__(self, client):
        self.client, self.calls = client, []

    def __getattr__(self, name):
        self.calls.append(name)
        return getattr(self.client, name)


def test_the_idle_stop_on_aws_stops_its_clusters_running_instances_and_no_other(ec2):
    """EC2 through moto: the cluster's running instances (its master among them), in one call; another cluster's and an
    untagged instance, and its own instance already stopped, are left as they are."""
    launch, tag = ec2.launch, "graviton.llama_rpc/cluster"
    ours = sorted(launch({tag: "demo", "graviton.llama_rpc/role": role}) for role in ("master", "workers", "workers"))
    parked = launch({tag: "demo"})
    ec2.client.stop_instances(InstanceIds=[parked])
    decoys = [launch({tag: "demo-2"}), launch({tag: "other"}), launch({})]
    counting = Counting(ec2.client)
    assert idle_stop.stop_instances("eu-west-1", tag, "demo", ec2=counting) == ours
    assert counting.calls == ["describe_instances", "stop_instances"]
    state = ec2.states()
    assert {state[instance] for instance in ours + [parked]} <= {"stopping", "stopped"}
    assert [state[decoy] for decoy in decoys] == ["running"] * 3
    # the same, once stopped: nothing more to stop, and no StopInstances call
    assert idle_stop.stop_instances("eu-west-1", tag, "demo", ec2=counting) == []
    assert counting.calls[2:] == ["describe_instances"]


def test_the_gateways_wake_starts_a_fronted_clusters_stopped_instances_and_no_other(ec2, capsys):
    """The gateway's AWS helper: a cluster it fronts has its stopped instances started in one call; a cluster it does
    not front is refused unasked; another cluster's and untagged stopped instances stay stopped; a second wake finds
    it running."""
    import io  # pylint: disable=import-outside-toplevel
    tag = "graviton.llama_rpc/cluster"
    ours = sorted(ec2.launch({tag: "demo"}) for _instance in range(3))
    decoys = [ec2.launch({tag: "demo-2"}), ec2.launch({tag: "other"}), ec2.launch({})]
    ec2.client.stop_instances(InstanceIds=ours + decoys)
    environ = {"WAKE_AWS_CLUSTERS": "eu-west-1:demo us-east-1:other"}

    def wake(line):
        answer, counting = io.BytesIO(), Counting(ec2.client)
        code = gateway_wake_aws.main(environ, io.BytesIO(line), answer, ec2=counting)
        return code, answer.getvalue().decode(), counting.calls
    for line in (b"eu-west-1 demo-2\n", b"eu-west-1 other\n", b"us-east-1 demo\n", b"eu-west-1\n", b"",
                 b"eu-west-1 demo extra\n"):
        assert wake(line) == (1, "refused\n", []), line
    assert wake(b"eu-west-1 demo\n") == (0, "starting %s\n" % " ".join(ours), ["describe_instances", "start_instances"])
    state = ec2.states()
    assert {state[instance] for instance in ours} <= {"pending", "running"}
    assert [state[decoy] for decoy in decoys] == ["stopped"] * 3
    assert wake(b"eu-west-1 demo\n") == (0, "running\n", ["describe_instances"])
    journal = capsys.readouterr().err
    assert "refused a wake: not a cluster this gateway fronts" in journal and "wake of cluster demo in eu-west-1: starting i-" in journal


def test_a_server_that_decodes_is_healthy_and_one_that_stops_is_restarted_after_the_timeout():
    stall = server_watchdog.Stall(timeout=300, now=0)
    busy_1, busy_2 = metrics("busy-1"), metrics("busy-2")
    assert stall.observe(busy_1, 5) == server_watchdog.HEALTHY  # a first figure
    assert stall.observe(busy_2, 10) == server_watchdog.HEALTHY  # a new decode step
    assert stall.observe(busy_2, 200) == server_watchdog.PENDING  # busy, no step for 190 s
    assert stall.observe(busy_2, 309) == server_watchdog.PENDING
    assert stall.observe(busy_2, 310) == server_watchdog.RESTART and stall.waited(310) == 300
    stall.forget(320)
    assert stall.observe(busy_2, 330) == server_watchdog.HEALTHY, "after a restart the figures start again"


def test_an_idle_server_is_never_restarted_and_a_loading_one_is_not_watched():
    stall = server_watchdog.Stall(timeout=300, now=0)
    assert all(stall.observe(metrics("idle"), now) == server_watchdog.HEALTHY for now in range(0, 3000, 100))
    assert stall.observe(metrics("busy-1"), 3000) == server_watchdog.HEALTHY
    assert stall.observe(None, 3200) == server_watchdog.PENDING  # restarted by someone, loading: the clock starts again
    assert stall.observe(metrics("busy-1"), 3400) == server_watchdog.HEALTHY


def test_a_metrics_page_that_does_not_answer_is_a_stall_at_once():
    stall = server_watchdog.Stall(timeout=300, now=0)
    assert stall.observe(server_state.STUCK, 5) == server_watchdog.RESTART


@pytest.mark.parametrize("shown, invocation", [
    ("ActiveState=active\nInvocationID=5d1f0c9a2b8e4e6f9d1c7a3b2e4f6a8c\n", "5d1f0c9a2b8e4e6f9d1c7a3b2e4f6a8c"),
    ("ActiveState=activating\nInvocationID=5d1f0c9a2b8e4e6f9d1c7a3b2e4f6a8c\n", None),
    ("ActiveState=inactive\nInvocationID=\n", None),
    ("", None),
])
def test_the_running_servers_invocation_is_read_from_systemctl_show(shown, invocation):
    assert server_state.parse_show(shown) == invocation


# --- the worker's tensor cache guard ---------------------------------------------------------------------------------
def fnv1a_64(path):
    return fnv1a64(Path(path).read_bytes())


def test_a_cache_file_left_short_is_removed_and_a_whole_one_is_hashed_once(tmp_path):
    calls = []

    def hasher(path):
        calls.append(Path(path).name)
        return fnv1a_64(path)

    weights = bytes(range(256)) * 64
    whole = tmp_path / fnv1a64(weights)
    whole.write_bytes(weights)
    (tmp_path / "notes.txt").write_text("not a cache file")
    guard = cache_guard.Guard(str(tmp_path), hasher, settle=2)
    assert guard.sweep(now=time.time() + 10) == [] and calls == [whole.name]

    short = tmp_path / fnv1a64(weights * 2)
    short.write_bytes(weights)  # the disk filled up: half of the tensor's bytes under the whole tensor's name
    removed = guard.sweep(now=time.time() + 10)
    assert removed == [(short.name, len(weights), len(weights), 1)]
    assert not short.exists() and whole.exists() and (tmp_path / "notes.txt").exists()
    assert guard.sweep(now=time.time() + 20) == []
    assert calls == [whole.name, short.name], "a whole file was hashed again"
    text = cache_guard.report(str(tmp_path), *removed[0])
    assert "Removed the tensor cache file %s (16.0 KiB)" % short.name in text and "rpc_worker_cache_dir" in text
    assert "the tensor cache holds 16.0 KiB in 1 files" in text


def test_the_guard_tells_a_change_by_the_collections_identity_of_a_file(tmp_path):
    """The guard cannot import module_utils: its state is made of the same fields as file_identity's."""
    from ansible_collections.graviton.llama_rpc.plugins.module_utils.host import file_identity
    seen = os.stat_result((0o100644, 11, 3, 1, 0, 0, 22, 5, 6, 7, 5.5, 6.5, 7.5, 0, 33, 44, 55))
    assert sorted(cache_guard.file_state(seen)) == sorted(file_identity.stat_identity(seen)) == [11, 22, 33, 44]


def test_a_file_still_being_written_is_left_alone(tmp_path):
    young = tmp_path / ("0" * 16)
    young.write_bytes(b"partial")
    guard = cache_guard.Guard(str(tmp_path), fnv1a_64, settle=2)
    assert guard.sweep(now=young.stat().st_mtime + 1) == [] and young.exists()
    assert guard.sweep(now=young.stat().st_mtime + 3) == [(young.name, 7, 0, 0)] and not young.exists()


def test_what_was_found_whole_is_not_hashed_again_after_a_restart(tmp_path):
    """The guard's state file: a start of a stopped worker hashes only the files written since (its cache is read once,
    by the load); a file rewritten in place (its change time moves) is hashed again."""
    cache, state = tmp_path / "rpc", tmp_path / "cache-guard.json"
    cache.mkdir()
    calls = []

    def hasher(path):
        calls.append(Path(path).name)
        return fnv1a_64(path)

    first, second = bytes(range(256)) * 64, bytes(range(255, -1, -1)) * 64
    (cache / fnv1a64(first)).write_bytes(first)
    assert cache_guard.Guard(str(cache), hasher, 2, str(state)).sweep(now=time.time() + 10) == []
    assert calls == [fnv1a64(first)] and state.exists()
    (cache / fnv1a64(second)).write_bytes(second)
    assert cache_guard.Guard(str(cache), hasher, 2, str(state)).sweep(now=time.time() + 10) == []
    assert calls == [fnv1a64(first), fnv1a64(second)], "a restart hashed a file found whole before"
    (cache / fnv1a64(first)).write_bytes(first[:100])  # cut short in place: its size and times moved
    removed = cache_guard.Guard(str(cache), hasher, 2, str(state)).sweep(now=time.time() + 10)
    assert [entry[0] for entry in removed] == [fnv1a64(first)]
    assert set(json.loads(state.read_text())) == {fnv1a64(second)}
    state.write_text("{not json")  # an unreadable state: everything is hashed again, nothing is trusted
    assert cache_guard.Guard(str(cache), hasher, 2, str(state)).sweep(now=time.time() + 10) == []
    assert calls[-1] == fnv1a64(second)


def test_the_check_before_the_worker_starts_removes_a_short_file_at_once(tmp_path, monkeypatch, capsys):
    """GUARD_ONCE=1, as the worker's unit runs it before the worker listens: every file is closed (no settling), one look,
    then it exits: a file a killed worker left short is gone before a load can ask for its hash."""
    cache = tmp_path / "rpc"
    cache.mkdir()
    weights = bytes(range(256)) * 64
    whole, short = cache / fnv1a64(weights), cache / fnv1a64(weights * 2)
    whole.write_bytes(weights)
    short.write_bytes(weights)  # written a moment ago, by a worker killed mid-write
    monkeypatch.setattr(cache_guard, "tool_hasher", lambda _tool: fnv1a_64)
    assert cache_guard.main({"CACHE_DIR": str(cache), "CACHE_TOOL": "unused", "GUARD_ONCE": "1",
                             "STATE_FILE": str(tmp_path / "state.json")}) == 0
    assert whole.exists() and not short.exists()
    out = capsys.readouterr().out
    assert "Removed the tensor cache file %s" % short.name in out and "1 files whole, 1 removed" in out


def test_a_cache_directory_not_made_yet_is_no_error(tmp_path):
    assert cache_guard.Guard(str(tmp_path / "rpc"), fnv1a_64, settle=2).sweep() == []


# --- llama-server's start: its workers first ---------------------------------------------------------------------------
wait_workers = daemon("rpc_master", "llama-server-wait-workers")


@pytest.mark.parametrize("value", ["10.0.2.11:50052,10.0.2.12:50099", "[fd00::b]:50052", "llama-worker-1:50052,"])
def test_the_worker_list_is_read_as_the_collection_writes_it(value):
    """LLAMA_ARG_RPC as rpc_master writes it (worker_list): each endpoint split as the split_endpoint filter splits it."""
    expected = [split_endpoint(item) for item in value.split(",") if item]
    assert wait_workers.endpoints(value) == [(item["host"], item["port"]) for item in expected]
    with pytest.raises(ValueError):
        wait_workers.endpoints("10.0.2.11")


def test_it_waits_for_every_worker_and_names_those_that_never_answer(monkeypatch):
    """A clock the test moves: the second worker accepts after 12 s (a line in the journal after 10); a third never, and
    is named when the bound passes."""
    now = [0.0]
    up_at = {("a", 1): 0, ("b", 2): 12, ("c", 3): 10 ** 9}
    logged = []
    monkeypatch.setattr(wait_workers, "log", logged.append)

    def accept(host, port):
        return now[0] >= up_at[(host, port)]

    def sleep(seconds):
        now[0] += seconds
    assert wait_workers.wait([("a", 1), ("b", 2)], 60, accept, lambda: now[0], sleep) == []
    assert now[0] == 12 and logged == ["waiting for RPC workers to accept connections: b:2 (10 s so far)"]
    now[0] = 0.0
    assert wait_workers.wait([("a", 1), ("c", 3)], 30, accept, lambda: now[0], sleep) == [("c", 3)]


def test_a_file_llama_server_loads_that_is_gone_is_named_before_the_wait(tmp_path):
    """The model and the draft model as the settings name them: one not there is named with its setting and the variable
    behind it; the script exits 1 at once, the program never started and no worker asked."""
    model, draft = tmp_path / "model.gguf", tmp_path / "draft.gguf"
    model.write_bytes(b"GGUF")
    environ = {"LLAMA_ARG_MODEL": str(model), "LLAMA_ARG_SPEC_DRAFT_MODEL": str(draft)}
    assert wait_workers.missing_files(environ) == [
        "%s, the draft model of speculative decoding (LLAMA_ARG_SPEC_DRAFT_MODEL), is not on this host: run "
        "playbooks/deploy.yml again, which fetches it (rpc_master_spec_draft_src)." % draft]
    draft.write_bytes(b"GGUF")
    assert wait_workers.missing_files(environ) == [] == wait_workers.missing_files({"LLAMA_ARG_MODEL": str(model)})
    script = ROOT / "roles" / "rpc_master" / "files" / "llama-server-wait-workers.py"
    marker = tmp_path / "started"
    done = subprocess.run([sys.executable, str(script), "--timeout", "600", "--", "/bin/sh", "-c", "touch %s" % marker],
                          env={"LLAMA_ARG_MODEL": str(tmp_path / "gone.gguf"), "LLAMA_ARG_RPC": "192.0.2.1:9"},
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 1 and not marker.exists(), done
    assert done.stdout.startswith("llama-server not started (systemd tries again): %s, the model (LLAMA_ARG_MODEL)"
                                  % (tmp_path / "gone.gguf")), done.stdout


def test_it_becomes_the_program_once_the_workers_accept(tmp_path):
    """A real listening socket for a worker: the script replaces itself with the program (here a shell that writes a
    file); with a worker that refuses, it exits 1 after the bound, the program never started."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # one connection per run, never accepted
    script = ROOT / "roles" / "rpc_master" / "files" / "llama-server-wait-workers.py"
    marker = tmp_path / "started"
    program = ["--", "/bin/sh", "-c", "echo started $GGML_RPC_LOAD_THREADS > %s" % marker]
    env = {"LLAMA_ARG_RPC": "127.0.0.1:%d" % listener.getsockname()[1], "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, str(script), "--timeout", "5"] + program, env=env, capture_output=True,
                         text=True, timeout=30, check=False)
    assert run.returncode == 0 and marker.read_text() == "started\n", run.stdout + run.stderr
    # the hash-ahead's "all" (rpc_master_load_threads 0) becomes the CPUs the unit may run on; a number stays
    for value, expected in (("all", str(len(os.sched_getaffinity(0)))), ("3", "3")):
        run = subprocess.run([sys.executable, str(script), "--timeout", "5"] + program,
                             env=dict(env, GGML_RPC_LOAD_THREADS=value), capture_output=True, text=True, timeout=30,
                             check=False)
        assert run.returncode == 0 and marker.read_text() == "started %s\n" % expected, run.stdout + run.stderr
    listener.close()
    marker.unlink()
    refused = subprocess.run([sys.executable, str(script), "--timeout", "1"] + program, env=env, capture_output=True,
                             text=True, timeout=30, check=False)
    assert refused.returncode == 1 and not marker.exists()
    assert "accept no connection after 1 s: llama-server not started (systemd tries again)" in refused.stdout


# --- the cluster's own figures for node_exporter (monitoring) --------------------------------------------------------
metrics_writer = daemon("monitoring", "llama-rpc-metrics")

SHOWN = """Id=llama-rpc-worker@main.service
ActiveState=active
NRestarts=2

Id=llama-rpc-worker@second.service
ActiveState=failed
NRestarts=5
"""


def test_the_figures_of_a_worker_are_its_services_and_its_tensor_cache(tmp_path):
    facts, cache = tmp_path / "facts.d", tmp_path / "cache" / "main" / "rpc"
    facts.mkdir()
    cache.mkdir(parents=True)
    (cache / "0123456789abcdef").write_bytes(b"x" * 1000)
    (cache / "fedcba9876543210").write_bytes(b"y" * 24)
    (facts / "llama_rpc_worker.fact").write_text(json.dumps({"unit": "llama-rpc-worker", "instances": [
        {"name": "main", "endpoint": "10.0.0.2:50052", "cache_dir": str(cache)},
        {"name": "second", "endpoint": "10.0.0.2:50053", "cache_dir": ""}]}))
    page = metrics_writer.page(metrics_writer.read_facts(str(facts)), metrics_writer.units_shown(SHOWN), None)
    lines = page.splitlines()
    assert 'llama_rpc_unit_active{unit="llama-rpc-worker@main.service"} 1' in lines
    assert 'llama_rpc_unit_active{unit="llama-rpc-worker@second.service"} 0' in lines
    assert 'llama_rpc_unit_restarts_total{unit="llama-rpc-worker@second.service"} 5' in lines
    assert 'llama_rpc_tensor_cache_files{worker_instance="main"} 2' in lines
    assert 'llama_rpc_tensor_cache_bytes{worker_instance="main"} 1024' in lines
    assert any(line.startswith('llama_rpc_tensor_cache_filesystem_avail_bytes{worker_instance="main"} ') for line in lines)
    assert "second" not in " ".join(line for line in lines if "tensor_cache" in line)
    assert "llama_rpc_load" not in page  # a worker has no loads


def test_how_long_a_worker_left_a_client_waiting_is_its_watchdogs_last_word_while_fresh(tmp_path):
    """The watchdog's answer file (llama-rpc-worker-watchdog.py's publish), fresh, stale (the watchdog is down) or
    missing (it is turned off): a figure only for the fresh one."""
    now = time.time()
    instances = []
    for name, answer in (("main", {"waited_seconds": 42.5, "at": now - 5}), ("old", {"waited_seconds": 99, "at": now - 600}),
                         ("none", None)):
        path = tmp_path / (name + ".json")
        if answer is not None:
            worker_watchdog.publish(str(path), answer["waited_seconds"], answer["at"])
        instances.append({"name": name, "answer_file": str(path)})
    instances.append({"name": "off", "answer_file": ""})
    (tmp_path / "llama_rpc_worker.fact").write_text(json.dumps({"unit": "llama-rpc-worker", "instances": instances}))
    page = metrics_writer.page(metrics_writer.read_facts(str(tmp_path)), {}, None, now=now)
    waits = [line for line in page.splitlines() if line.startswith("llama_rpc_worker_unanswered_seconds")]
    assert waits == ['llama_rpc_worker_unanswered_seconds{worker_instance="main"} 42.5'], page


def test_a_service_systemd_does_not_know_is_down(tmp_path):
    (tmp_path / "llama_rpc_master.fact").write_text(json.dumps({"server_unit": "llama-server.service"}))
    assert 'llama_rpc_unit_active{unit="llama-server.service"} 0' in metrics_writer.page(metrics_writer.read_facts(str(tmp_path)), {}, None)


def test_the_last_load_is_from_the_last_loading_model_to_its_model_loaded():
    entries = [(1_000_000, "srv  load_model: loading model '/var/lib/llama-models/a.gguf'"), (4_500_000, "main: model loaded"),
               (9_000_000, "srv  load_model: loading model '/var/lib/llama-models/a.gguf'"), (21_250_000, "srv  main: model loaded")]
    assert metrics_writer.last_load_seconds(entries) == 12.25
    # a start that has not loaded yet: no figure, not the one before it
    assert metrics_writer.last_load_seconds(entries[:3]) is None
    assert metrics_writer.last_load_seconds([]) is None


def test_a_load_is_read_once_per_run_of_llama_server_and_kept_while_the_next_one_loads():
    reads = []

    def journal(invocation):
        reads.append(invocation)
        return {"first": [(0, "loading model 'm'"), (2_000_000, "model loaded")],
                "second": [(0, "loading model 'm'")]}[invocation]
    seconds, state = metrics_writer.last_load({}, "first", journal)
    assert (seconds, state) == (2.0, {"invocation": "first", "seconds": 2.0}) and reads == ["first"]
    assert metrics_writer.last_load(state, "first", journal) == (2.0, state) and reads == ["first"]  # not read again
    # a restart that is loading: the last load stays, and its journal is read again at the next run
    assert metrics_writer.last_load(state, "second", journal) == (2.0, state) and reads == ["first", "second"]
    assert metrics_writer.last_load({}, "", journal) == (None, {})


def test_the_figures_of_a_master_are_its_load_beside_its_prediction_and_its_bench(tmp_path):
    (tmp_path / "llama_rpc_master.fact").write_text(json.dumps({
        "server_unit": "llama-server.service", "plan": {"split_mode": "tensor", "workers": [{}, {}]},
        "load_prediction": {"cold": {"seconds": 21.5, "bound": "network"}, "staged": {"seconds": 9.0}}}))
    (tmp_path / "llama_rpc_bench.fact").write_text(json.dumps({"runs": [
        {"workers": 2, "test": "tg16", "tokens_per_second": 30.0}, {"workers": 0, "test": "tg16", "tokens_per_second": 40.5},
        {"workers": 2, "test": "tg16", "tokens_per_second": 31.25}]}))  # the same test twice: the last one
    shown = "Id=llama-server.service\nActiveState=active\nNRestarts=0\n"
    page = metrics_writer.page(metrics_writer.read_facts(str(tmp_path)), metrics_writer.units_shown(shown), 3.5)
    lines = [line for line in page.splitlines() if not line.startswith("#")]
    assert lines == ['llama_rpc_unit_active{unit="llama-server.service"} 1',
                     'llama_rpc_unit_restarts_total{unit="llama-server.service"} 0',
                     "llama_rpc_load_seconds 3.5",
                     'llama_rpc_load_predicted_seconds{caches="cold"} 21.5',
                     'llama_rpc_load_predicted_seconds{caches="staged"} 9.0',
                     'llama_rpc_bench_tokens_per_second{test="tg16",workers="2"} 31.25',
                     'llama_rpc_bench_tokens_per_second{test="tg16",workers="0"} 40.5',
                     'llama_rpc_split_info{mode="tensor",workers="2"} 1']


def test_the_file_is_replaced_whole_and_read_by_prometheus(tmp_path):
    """What node_exporter's textfile collector reads: the text format, parsed by Prometheus's own promtool (the
    distribution's, tests/bed/promtool.sh)."""
    fact = {"server_unit": "llama-server.service", "load_prediction": {"cold": {"seconds": 2}}}
    (tmp_path / "llama_rpc_master.fact").write_text(json.dumps(fact))
    output = tmp_path / "llama_rpc.prom"
    page = metrics_writer.page(metrics_writer.read_facts(str(tmp_path)),
                               metrics_writer.units_shown('Id=llama-server.service\nActiveState=active\nNRestarts=1\n'), 3.5)
    output.write_text("old")
    metrics_writer.write(str(output), page)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["llama_rpc.prom", "llama_rpc_master.fact"]
    assert oct(output.stat().st_mode & 0o777) == "0o644"
    checked = subprocess.run([os.environ["LLAMA_RPC_PROMTOOL"], "check", "metrics"], input=output.read_text(),
                             capture_output=True, text=True, check=False)
    assert checked.returncode == 0 and not checked.stdout + checked.stderr, checked.stdout + checked.stderr
    broken = subprocess.run([os.environ["LLAMA_RPC_PROMTOOL"], "check", "metrics"], input='llama_rpc_unit_active{unit="x} 1\n',
                            capture_output=True, text=True, check=False)
    assert "error while linting" in broken.stderr, broken.stderr
