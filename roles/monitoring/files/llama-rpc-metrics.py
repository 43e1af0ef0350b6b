# Installed by the graviton.llama_rpc collection (role monitoring): a deploy overwrites changes made here.
"""Writes the cluster's own figures for node_exporter's textfile collector, once per run (a systemd timer runs it).

What node_exporter cannot see on its own, read from what the collection's roles published on this host
(/etc/ansible/facts.d) and from systemd:
- each service of the collection up or down, and how often systemd restarted it (the RPC workers, llama-server);
- each worker's tensor cache: its files, their bytes, the free space of the filesystem that holds it;
- how long a client has waited for an answer from each worker (its watchdog looks at the port's connections and probes
  it: a frozen worker is found by what it leaves unanswered, whatever systemd says of its unit);
- on a master: the load of the running llama-server (from its journal: "loading model" to "model loaded") beside
  the load-time model's prediction for its plan, and the last bench's tokens per second (through the workers and alone).

The file is written beside its place and renamed, so node_exporter never reads half of it.
"""

import argparse
import json
import os
import subprocess
import sys
import time

FACTS = "/etc/ansible/facts.d"
# The last load seen (llama-server's InvocationID and its seconds): kept, because the journal may rotate the start's
# lines away on a long-running server, and a server that is loading has no load of its own yet.
STATE = "/var/lib/llama-rpc-metrics/last-load.json"
# Each figure's type and help line, as Prometheus's text format has them.
FAMILIES = {
    "llama_rpc_unit_active": ("gauge", "1 when the collection's service (an RPC worker instance, llama-server) is active."),
    "llama_rpc_unit_restarts_total": ("counter", "How often systemd restarted the service since it was started by hand."),
    "llama_rpc_tensor_cache_files": ("gauge", "Files in the RPC worker instance's tensor cache."),
    "llama_rpc_tensor_cache_bytes": ("gauge", "Bytes in the RPC worker instance's tensor cache."),
    "llama_rpc_tensor_cache_filesystem_avail_bytes": ("gauge", "Free bytes of the filesystem that holds the tensor cache."),
    "llama_rpc_tensor_cache_filesystem_size_bytes": ("gauge", "Size of the filesystem that holds the tensor cache."),
    "llama_rpc_worker_unanswered_seconds": ("gauge", "Seconds a client has waited for an answer from the RPC worker instance "
                                                     "(0: none waits), as its watchdog last saw it."),
    "llama_rpc_load_seconds": ("gauge", "Seconds the running llama-server took to load its model."),
    "llama_rpc_load_predicted_seconds": ("gauge", "The load-time model's prediction for the plan, with cold or staged caches."),
    "llama_rpc_bench_tokens_per_second": ("gauge", "The last bench.yml's tokens per second (workers 0: the master alone)."),
    "llama_rpc_split_info": ("gauge", "1, labelled with how the served model is split across the workers (rpc_master_split_mode: "
                                      "layer or tensor) and over how many."),
}


def fact(name, facts_dir):
    try:
        with open(os.path.join(facts_dir, name + ".fact")) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def label(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def sample(name, value, **labels):
    text = ",".join('%s="%s"' % (key, label(labels[key])) for key in sorted(labels))
    return "%s%s %s" % (name, "{%s}" % text if text else "", repr(float(value)) if isinstance(value, float) else value)


def units_shown(text):
    """{unit: {property: value}} of `systemctl show -p Id -p ActiveState -p NRestarts -p InvocationID UNIT...` (a block
    per unit)."""
    found, block = {}, {}
    for line in text.splitlines() + [""]:
        if not line.strip():
            if block.get("Id"):
                found[block["Id"]] = block
            block = {}
            continue
        key, _sep, value = line.partition("=")
        block[key] = value
    return found


def unit_samples(units, shown):
    lines = []
    for unit in units:
        state = shown.get(unit, {})
        lines.append(sample("llama_rpc_unit_active", 1 if state.get("ActiveState") == "active" else 0, unit=unit))
        restarts = state.get("NRestarts", "")
        if restarts.isdigit():
            lines.append(sample("llama_rpc_unit_restarts_total", int(restarts), unit=unit))
    return lines


def cache_samples(instances):
    lines = []
    for instance in instances:
        directory = instance.get("cache_dir") or ""
        if not directory or not os.path.isdir(directory):
            continue
        files = size = 0
        for entry in os.scandir(directory):
            if entry.is_file(follow_symlinks=False):
                files += 1
                size += entry.stat(follow_symlinks=False).st_size
        disk = os.statvfs(directory)
        name = instance.get("name", "")
        lines += [sample("llama_rpc_tensor_cache_files", files, worker_instance=name),
                  sample("llama_rpc_tensor_cache_bytes", size, worker_instance=name),
                  sample("llama_rpc_tensor_cache_filesystem_avail_bytes", disk.f_bavail * disk.f_frsize, worker_instance=name),
                  sample("llama_rpc_tensor_cache_filesystem_size_bytes", disk.f_blocks * disk.f_frsize, worker_instance=name)]
    return lines


# A watchdog's answer older than this is no answer: the watchdog is down (its unit's own figure says so).
ANSWER_STALE_SECONDS = 120


def answer_samples(instances, now):
    """From each worker instance's watchdog (its answer_file: waited_seconds, at), while it is fresh."""
    lines = []
    for instance in instances:
        try:
            with open(instance.get("answer_file") or "") as handle:
                answer = json.load(handle)
            waited, at = float(answer["waited_seconds"]), float(answer["at"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if now - at <= ANSWER_STALE_SECONDS:
            lines.append(sample("llama_rpc_worker_unanswered_seconds", waited, worker_instance=instance.get("name", "")))
    return lines


def last_load_seconds(entries):
    """Seconds from llama-server's last "loading model" to its "model loaded", from its journal's entries
    [(microseconds, message)] in order; None when the last start has not loaded yet (or no start is there)."""
    started = loaded = None
    for when, message in entries:
        if "loading model '" in message:
            started, loaded = when, None
        elif "model loaded" in message and started is not None:
            loaded = when
    return None if started is None or loaded is None else (loaded - started) / 1e6


def journal_entries(invocation):
    """[(microseconds, message)] of the journal lines about the model's load of one run of a unit (its InvocationID:
    an indexed field, so the journal is not read whole at every run), oldest first."""
    output = subprocess.run(["journalctl", "_SYSTEMD_INVOCATION_ID=" + invocation, "-o", "json", "--no-pager",
                             "--output-fields=MESSAGE", "--grep", "loading model|model loaded"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True, check=False).stdout
    entries = []
    for line in output.splitlines():
        try:
            entry = json.loads(line)
            message = entry.get("MESSAGE")
            if isinstance(message, list):  # journald gives a message that is not UTF-8 as bytes
                message = bytes(message).decode("utf-8", "replace")
            entries.append((int(entry["__REALTIME_TIMESTAMP"]), message or ""))
        except (ValueError, KeyError, TypeError):
            continue
    return entries


def last_load(state, invocation, read_journal):
    """(seconds or None, state to keep): the running invocation's load, read from its journal once and kept; while it
    has none (it loads), the last one kept."""
    if invocation and state.get("invocation") == invocation and state.get("seconds") is not None:
        return state["seconds"], state
    seconds = last_load_seconds(read_journal(invocation)) if invocation else None
    if seconds is None:
        return state.get("seconds"), state
    return seconds, {"invocation": invocation, "seconds": seconds}


def master_samples(master, bench, load_seconds):
    lines = []
    plan = master.get("plan") or {}
    if plan.get("workers"):
        lines.append(sample("llama_rpc_split_info", 1, mode=plan.get("split_mode", "layer"), workers=len(plan["workers"])))
    if load_seconds is not None:
        lines.append(sample("llama_rpc_load_seconds", round(load_seconds, 3)))
    for caches, prediction in sorted((master.get("load_prediction") or {}).items()):
        if isinstance(prediction, dict) and isinstance(prediction.get("seconds"), (int, float)):
            lines.append(sample("llama_rpc_load_predicted_seconds", float(prediction["seconds"]), caches=caches))
    # one figure per number of workers and test (a series twice would make node_exporter drop the whole file): the last
    figures = {}
    for run in bench.get("runs") or []:
        if isinstance(run.get("tokens_per_second"), (int, float)):
            figures[(str(run.get("workers", "")), str(run.get("test", "")))] = float(run["tokens_per_second"])
    for (workers, test), value in figures.items():
        lines.append(sample("llama_rpc_bench_tokens_per_second", value, workers=workers, test=test))
    return lines


def read_facts(facts_dir):
    """What the collection's roles published on this host: {worker, master, bench}, each {} where absent."""
    return {role: fact("llama_rpc_" + role, facts_dir) for role in ("worker", "master", "bench")}


def page(facts, shown, load_seconds, now=None):
    """The whole textfile for this host, from its published facts (read_facts), systemctl's answer (units_shown) and
    the last load's seconds."""
    worker, master = facts["worker"], facts["master"]
    lines = unit_samples(units_of(worker, master), shown)
    lines += cache_samples(worker.get("instances") or [])
    lines += answer_samples(worker.get("instances") or [], time.time() if now is None else now)
    if master:
        lines += master_samples(master, facts["bench"], load_seconds)
    return exposition(lines)


def exposition(lines):
    """The samples grouped by figure, each group under its TYPE and HELP lines."""
    text = []
    for name in FAMILIES:
        samples = [line for line in lines if line.split("{")[0].split(" ")[0] == name]
        if samples:
            kind, help_text = FAMILIES[name]
            text += ["# HELP %s %s" % (name, help_text), "# TYPE %s %s" % (name, kind)] + samples
    return "\n".join(text) + "\n"


def units_of(worker, master):
    units = ["%s@%s.service" % (worker.get("unit", "llama-rpc-worker"), instance["name"])
             for instance in worker.get("instances") or [] if instance.get("name")]
    if master.get("server_unit"):
        units.append(master["server_unit"])
    return units


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, help="the .prom file node_exporter's textfile collector reads")
    parser.add_argument("--facts-dir", default=FACTS)
    parser.add_argument("--state", default=STATE)
    args = parser.parse_args(argv)
    facts = read_facts(args.facts_dir)
    master = facts["master"]
    units = units_of(facts["worker"], master)
    shown = units_shown(subprocess.run(
        ["systemctl", "show", "-p", "Id", "-p", "ActiveState", "-p", "NRestarts", "-p", "InvocationID"] + units,
        stdout=subprocess.PIPE, universal_newlines=True, check=False).stdout if units else "")
    invocation = shown.get(master.get("server_unit", ""), {}).get("InvocationID", "")
    try:
        with open(args.state) as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        state = {}
    seconds, kept = last_load(state, invocation, journal_entries) if master else (None, state)
    if kept != state:
        write(args.state, json.dumps(kept))
    write(args.output, page(facts, shown, seconds))
    return 0


def write(path, text):
    """The file whole, or as it was: written beside its place, then renamed over it."""
    temporary = path + ".tmp"
    with open(temporary, "w") as handle:
        handle.write(text)
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)


if __name__ == "__main__":
    sys.exit(main())
