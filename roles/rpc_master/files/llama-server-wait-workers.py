# Installed by the graviton.llama_rpc collection (role rpc_master): a deploy overwrites changes made here.
"""Starts llama-server once every RPC worker it uses accepts a connection.

llama.cpp's RPC client aborts the whole process (SIGABRT) when a worker does not answer at start-up. After every node
of a cluster restarts (a reboot, a stopped cluster started again), the master's llama-server is often up before its
workers: it aborted, and systemd started it again, once per worker too slow. So its unit runs this first: it connects
to each worker of LLAMA_ARG_RPC (the worker list, from the unit's EnvironmentFile) and closes at once (a worker that
accepts serves the next client, llama-server), until every one accepts, then replaces itself with llama-server (exec:
the same process, the same unit). Past --timeout it exits 1, naming the workers that did not answer, and systemd
starts the unit again later (Restart=always). Before that, the files llama-server loads (LLAMA_ARG_MODEL, and
LLAMA_ARG_SPEC_DRAFT_MODEL for speculative decoding) must be there: one that is gone is named, and it exits 1.

    python3 llama-server-wait-workers.py --timeout SECONDS -- /path/to/llama-server [ARGS...]
"""

import argparse
import os
import socket
import sys
import time

NOTE_EVERY = 10  # seconds between the journal's lines while it waits


def log(message):
    print(message, flush=True)


def endpoints(value):
    """[(host, port)] of a worker list (host:port, [IPv6]:port, comma separated), as llama.cpp's --rpc reads it."""
    found = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        host, _colon, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError("%r is not host:port" % item)
        found.append((host[1:-1] if host.startswith("[") and host.endswith("]") else host, int(port)))
    return found


def accepts(host, port, timeout=2.0):
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait(workers, timeout, accept=accepts, clock=time.monotonic, sleep=time.sleep):
    """The workers that still do not accept a connection after timeout seconds (empty: all do)."""
    started = clock()
    noted = started
    while True:
        silent = [worker for worker in workers if not accept(*worker)]
        if not silent:
            return []
        now = clock()
        if now - started >= timeout:
            return silent
        if now - noted >= NOTE_EVERY:
            log("waiting for RPC workers to accept connections: %s (%d s so far)"
                % (", ".join("%s:%d" % worker for worker in silent), now - started))
            noted = now
        sleep(1)


# The files llama-server loads, by the setting that names them and the role variable behind it.
LOADED_FILES = (("LLAMA_ARG_MODEL", "the model", "rpc_master_model_src"),
                ("LLAMA_ARG_SPEC_DRAFT_MODEL", "the draft model of speculative decoding", "rpc_master_spec_draft_src"))


def missing_files(environ):
    """One sentence per file llama-server would load and cannot read (empty: all there)."""
    found = []
    for setting, what, variable in LOADED_FILES:
        path = environ.get(setting)
        if path and not os.access(path, os.R_OK):
            found.append("%s, %s (%s), is not on this host: run playbooks/deploy.yml again, which fetches it (%s)."
                         % (path, what, setting, variable))
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("the program to start (llama-server) is missing")
    gone = missing_files(os.environ)
    if gone:
        log("llama-server not started (systemd tries again): " + " ".join(gone))
        return 1
    try:
        workers = endpoints(os.environ.get("LLAMA_ARG_RPC", ""))
    except ValueError as error:
        log("LLAMA_ARG_RPC: %s" % error)
        return 1
    silent = wait(workers, args.timeout)
    if silent:
        log("RPC workers %s accept no connection after %d s: llama-server not started (systemd tries again). Start them "
            "(systemctl start llama-rpc-worker@main), or check the network between the master and them."
            % (", ".join("%s:%d" % worker for worker in silent), args.timeout))
        return 1
    # rpc_master_load_threads 0: the build's hash-ahead on every CPU this unit may run on
    if os.environ.get("GGML_RPC_LOAD_THREADS") == "all":
        os.environ["GGML_RPC_LOAD_THREADS"] = str(len(os.sched_getaffinity(0)))
    os.execv(program[0], program)
    return 1  # not reached: execv replaces this process


if __name__ == "__main__":
    sys.exit(main())
