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
(seen here about one run in ten), so a run without the JSON line is repeated, and after that the plain lines serve.
"""

from __future__ import annotations

import json
import re

MIB = 1 << 20
PARTS = ("model", "context", "compute")
ATTEMPTS = 4  # runs that lose their JSON line before the plain table is used
_PLAIN_ROW = re.compile(r"^(\S+) (\d+) (\d+) (\d+)\s*$")


class ProjectionError(RuntimeError):
    """llama.cpp could not project the model (it would not load it either)."""


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
            timeout=300):
    """Run llama.cpp's projection with run (AnsibleModule.run_command: argv, environ_update -> rc, stdout, stderr),
    bounded by coreutils' timeout; returns parse()'s dict, or raises ProjectionError with llama.cpp's own reason."""
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
            reasons = [line for line in (stderr + stdout).splitlines()
                       if " E " in line or "error" in line.lower() or "failed" in line.lower()]
            raise ProjectionError("llama-fit-params failed (exit %d): %s" % (
                code, " | ".join(_message(line) for line in reasons[-4:]) or "no reason printed"))
        if _json_table(stdout) is not None:
            break
    return parse(stdout, endpoints)


def _message(line):
    """A log line's text: the JSON lines' msg, or the line."""
    try:
        return json.loads(line).get("msg", line).strip()
    except ValueError:
        return line.strip()
