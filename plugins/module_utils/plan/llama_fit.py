# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llama.cpp's own projection of what a model will allocate on each device, without allocating it.

llama-fit-params --fit-print on (tools/fit-params, common/fit.cpp common_fit_print) loads the model's header with
no_alloc, builds the context and reserves its compute graphs exactly as llama-server does, and reports per device the
bytes of the weights ("model"), the caches ("context") and the compute buffers ("compute"). It reads no tensor data, so
it costs a fraction of a second even for a model of hundreds of GB, and it asks the RPC workers only for their buffer
types' alignment and sizes (they must be free: a worker serves one client at a time). Figures are whole MiB (rounded
down): each is taken here as the next MiB up, so it is never below what llama.cpp allocates.

It prints the table twice: as plain lines on stdout ("RPC0 21273 20992 408", one per device in --rpc order, then
"Host ..."), and with --log-jsonl as one JSON line ("fit_memory_breakdown") through its logger, which also lists the
master's other buffer types (CPU_REPACK: weights repacked for the CPU, which the Host row leaves out) and names each
device by its endpoint. The logger writes from a thread of its own and can lose its last line when the program exits
(seen here about one run in ten), so a run without the JSON line is repeated, and after that the plain lines serve; a
failed run whose log lost llama.cpp's reason is repeated too.

A running llama-server holds its workers (a worker serves one client at a time), so a plan made while it serves, to
refuse a new model before it is touched, projects against stand-ins: ggml-rpc-server of the master's own build, one per
worker, on the master's loopback for the projection's few seconds (stand_ins(): transient systemd units, sandboxed, so
that they outlive run_command's call and end on their own). A projection asks an RPC device only for its buffer type's
alignment, its largest buffer and each tensor's allocation size, which a CPU worker of the same source answers alike on
any host; the memory each worker has comes from its probe (or, while it is held, from the
probe the plan it runs with was made from), never from the stand-in.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import time

MIB = 1 << 20
PARTS = ("model", "context", "compute")
ATTEMPTS = 4  # runs that lose their JSON line before the plain table is used
_PLAIN_ROW = re.compile(r"^(\S+) (\d+) (\d+) (\d+)\s*$")


class ProjectionError(RuntimeError):
    """llama.cpp could not project the model (it would not load it either)."""


STAND_IN_START_SECONDS = 10
# A stand-in that a killed plan could not stop ends on its own after this long (systemd's RuntimeMaxSec).
STAND_IN_LIFETIME_SECONDS = 3600
# The stand-ins serve the projection on loopback only, sandboxed as a worker is: no user, no files, no devices.
STAND_IN_SANDBOX = ("DynamicUser=yes", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
                    "PrivateDevices=yes", "RestrictAddressFamilies=AF_INET AF_UNIX")


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _accepts(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def stand_in_command(program, unit, port, lifetime=STAND_IN_LIFETIME_SECONDS):
    """systemd-run's command line for one stand-in: a transient unit (gone when stopped or failed), so that it outlives
    the call that starts it, is sandboxed, and ends after lifetime seconds even if nobody stops it."""
    properties = ["--property=%s" % value for value in STAND_IN_SANDBOX + ("RuntimeMaxSec=%d" % lifetime,)]
    return (["systemd-run", "--quiet", "--collect", "--unit", unit, "--setenv=GGML_NO_BACKTRACE=1"] + properties
            + ["--", program, "-H", "127.0.0.1", "-p", str(port), "-t", "1"])


@contextlib.contextmanager
def stand_ins(run, program, count, start_seconds=STAND_IN_START_SECONDS):
    """count ggml-rpc-server stand-ins of program on 127.0.0.1 (no cache, one thread), each a transient systemd unit
    listening on a port of its own, started with run (AnsibleModule.run_command: argv -> rc, stdout, stderr): yields
    their endpoints, in order, and stops them on exit. Raises ProjectionError when one does not listen."""
    units, endpoints = [], []
    try:
        for _index in range(count):
            port = _free_port()
            unit = "llama-rpc-stand-in-%d" % port
            code, _stdout, stderr = run(stand_in_command(program, unit, port))
            if code != 0:
                raise ProjectionError("cannot start the stand-in worker %s: %s" % (program, stderr.strip()[-300:]))
            units.append(unit)
            endpoints.append("127.0.0.1:%d" % port)
        deadline = time.monotonic() + start_seconds
        for unit, endpoint in zip(units, endpoints):
            port = int(endpoint.rsplit(":", 1)[1])
            while not _accepts(port):
                _code, state, _stderr = run(["systemctl", "show", "--property=ActiveState", "--value", unit])
                if state.strip() not in ("active", "activating"):
                    _code, log, _stderr = run(["journalctl", "--unit", unit, "--output=cat", "--no-pager", "--lines=20"])
                    raise ProjectionError("the stand-in worker %s exited: %s" % (program, log.strip()[-300:]))
                if time.monotonic() > deadline:
                    raise ProjectionError("the stand-in worker %s did not listen on %s within %ds"
                                          % (program, endpoint, start_seconds))
                time.sleep(0.05)
        yield endpoints
    finally:
        if units:
            run(["systemctl", "stop"] + units)


def command(program, model_path, endpoints, gpu_layers, tensor_split, context, slots, flash_attn="auto", extra=()):
    """The llama-fit-params command line for llama-server's settings."""
    argv = [program, "--fit-print", "on", "--log-jsonl", "-m", model_path, "-ngl", str(gpu_layers),
            "-c", str(context), "-np", str(slots), "-fa", flash_attn]
    if endpoints:
        argv += ["--rpc", ",".join(endpoints)]
        if tensor_split:
            argv += ["-ts", ",".join(str(value) for value in tensor_split)]
    return argv + list(extra)


def _json_table(stdout):
    table = None
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("type") == "fit_memory_breakdown":
            table = record["data"]
    if table is not None and table.get("unit") != "MiB":
        raise ProjectionError("llama-fit-params printed its breakdown in %r, not MiB" % table.get("unit"))
    return table


def _plain_table(stdout):
    """The plain lines, as rows like the JSON ones (devices, then the host)."""
    rows = []
    for line in stdout.splitlines():
        match = _PLAIN_ROW.match(line)
        if match:
            name, model, context, compute = match.groups()
            rows.append({"kind": "host" if name == "Host" else "device", "name": name, "model": int(model),
                         "context": int(context), "compute": int(compute)})
    if not any(row["kind"] == "host" for row in rows):
        return None
    return {"unit": "MiB", "rows": rows, "plain": True}


def parse(stdout, endpoints):
    """{"workers": {endpoint: {model, context, compute}}, "master": {...}, "complete": bool} in bytes, from
    llama-fit-params' output (complete: from the JSON line, which counts the master's repacked weights too)."""
    table = _json_table(stdout) or _plain_table(stdout)
    if table is None:
        raise ProjectionError("llama-fit-params printed no memory breakdown")

    def figures(row):
        return {part: (int(row.get(part, 0)) + 1) * MIB for part in PARTS}

    workers = {endpoint: {part: 0 for part in PARTS} for endpoint in endpoints}
    master = {part: 0 for part in PARTS}
    devices = [row for row in table["rows"] if row.get("kind") == "device"]
    for index, row in enumerate(devices):
        # a worker's device is described by its endpoint (in --rpc order); several devices of one worker add up
        owner = next((endpoint for endpoint in endpoints if endpoint in str(row.get("description", ""))), None)
        if owner is None:
            if len(devices) != len(endpoints):
                raise ProjectionError("llama.cpp lists devices %s for the workers %s" % (
                    ", ".join("%s (%s)" % (row.get("name"), row.get("description", "?")) for row in devices),
                    ", ".join(endpoints)))
            owner = endpoints[index]
        for part, value in figures(row).items():
            workers[owner][part] += value
    for row in table["rows"]:
        if row.get("kind") != "device":  # Host, and the master's other buffer types (CPU_REPACK)
            for part, value in figures(row).items():
                master[part] += value
    return {"workers": workers, "master": master, "complete": not table.get("plain")}


def project(run, program, model_path, endpoints, gpu_layers, tensor_split, context, slots, flash_attn="auto", extra=(),
            timeout=300, split_mode="layer"):
    """Run llama.cpp's projection with run (AnsibleModule.run_command: argv, environ_update -> rc, stdout, stderr),
    bounded by coreutils' timeout; returns parse()'s dict (split_mode tensor: parse_tensor()'s), or raises
    ProjectionError with llama.cpp's own reason."""
    if split_mode == "tensor":  # flash attention is required there (llama-context.cpp)
        extra, flash_attn = ["-sm", "tensor"] + list(extra), "on"
    argv = ["timeout", str(int(timeout))] + command(program, model_path, endpoints, gpu_layers, tensor_split, context,
                                                    slots, flash_attn, extra)
    for _attempt in range(ATTEMPTS):
        try:
            code, stdout, stderr = run(argv, environ_update={"GGML_NO_BACKTRACE": "1", "LLAMA_LOG_COLORS": "0"})
        except OSError as error:
            raise ProjectionError("cannot run %s: %s" % (program, error))
        if code == 124:
            raise ProjectionError("llama-fit-params did not finish within %ds (a worker that does not answer?)" % timeout)
        if code != 0:
            reasons = [_message(line) for line in (stderr + stdout).splitlines()
                       if " E " in line or "error" in line.lower() or "failed" in line.lower()]
            # the same logger thread can lose llama.cpp's own reason when a failed load ends the program (an uncaught
            # exception aborts it): only the exception's generic words are left, so the run is repeated
            if all(_generic(reason) for reason in reasons) and _attempt + 1 < ATTEMPTS:
                continue
            raise ProjectionError("llama-fit-params failed (exit %d): %s" % (
                code, " | ".join(reasons[-4:]) or "no reason printed"))
        if _json_table(stdout) is not None:
            break
    return parse_tensor(stdout) if split_mode == "tensor" else parse(stdout, endpoints)


def parse_tensor(stdout):
    """{"meta": {model, context, compute}, "master": {...}, "complete": bool} in bytes, from llama-fit-params' output
    with --split-mode tensor: one "Meta()" device stands for every worker. Without allocating, llama.cpp counts there
    each weight and cache whole (the split's share of each is not known before buffers exist) and one worker's compute
    buffer; tensor_split.worker_bounds turns the first two into a worker's."""
    table = _json_table(stdout) or _plain_table(stdout)
    if table is None:
        raise ProjectionError("llama-fit-params printed no memory breakdown")
    devices = [row for row in table["rows"] if row.get("kind") == "device"]
    if len(devices) != 1 or not str(devices[0].get("name", "")).startswith("Meta"):
        raise ProjectionError("llama.cpp made no Meta device for tensor parallelism (devices: %s)"
                              % ", ".join(str(row.get("name")) for row in devices))

    def figures(row):
        return {part: (int(row.get(part, 0)) + 1) * MIB for part in PARTS}
    master = {part: 0 for part in PARTS}
    for row in table["rows"]:
        if row.get("kind") != "device":
            for part, value in figures(row).items():
                master[part] += value
    return {"meta": figures(devices[0]), "master": master, "complete": not table.get("plain")}


def _generic(reason):
    """Whether a reason is only the words of the exception a failed load throws, not llama.cpp's logged cause."""
    return reason.startswith(("terminate called", "what():")) or reason.endswith("failed to load model")


def _message(line):
    """A log line's text: the JSON lines' msg, or the line."""
    try:
        return json.loads(line).get("msg", line).strip()
    except ValueError:
        return line.strip()
