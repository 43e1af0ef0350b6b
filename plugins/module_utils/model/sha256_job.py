# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A file's sha256 computed by a process of its own, which outlives the module call that started it: a 200 GB part
takes minutes to hash, and model_fetch returns every few seconds with its progress. sha256's state cannot be saved
between calls, so one process reads the file once, start to end, and reports as it goes.

This file is also that process's program: start() runs it with Python (its own source, which the module's zip holds),
and it detaches itself (a fork, a session of its own, its output nowhere), so the call that started it returns at once.
Its report is a JSON file, replaced whole at each write: {"pid", "done", "size"}, then "sha256" or "error" at the end.

A download over byte ranges is hashed as it lands (follow_file): the process reads the file up to the bytes landed
from its start on, as the download's record of its ranges says ({"prefix", "total"}, fetch_ranges.py), and waits for
more. At the end its report has the file's identity as it read it last (inode, size, modification and status change
times), so that whoever trusts the hash knows the file has not changed since.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

BLOCK = 8 << 20
# A download that lands nothing for this long was given up (its run killed): a hash that follows it stops.
FOLLOW_IDLE_SECONDS = 300


def _report(out, state):
    with open(out + ".tmp", "w") as handle:
        json.dump(state, handle)
    os.replace(out + ".tmp", out)


def hash_file(path, out):
    """Hashes path, reporting into out about once a second."""
    state = {"pid": os.getpid(), "done": 0, "size": 0}
    digest, last = hashlib.sha256(), 0.0
    try:
        state["size"] = os.path.getsize(path)
        _report(out, state)
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(BLOCK), b""):
                digest.update(block)
                state["done"] += len(block)
                if time.monotonic() - last > 1:
                    _report(out, state)
                    last = time.monotonic()
        state["sha256"] = digest.hexdigest()
    except OSError as error:
        state["error"] = str(error)
    _report(out, state)


def _landed(ranges_record):
    """(bytes landed from the start on, the file's size) from a ranged download's record; None when it is gone."""
    try:
        with open(ranges_record) as handle:
            record = json.load(handle)
        return int(record["prefix"]), int(record["total"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _given_up(lease):
    """Whether the run that downloads gave up: its lease ("FILE:SECONDS", model_fetch's) is older than its seconds."""
    if not lease:
        return False
    path, _colon, seconds = lease.rpartition(":")
    try:
        return time.time() - os.stat(path).st_mtime > float(seconds)
    except (OSError, ValueError):
        return True


def follow_file(path, out, ranges_record, lease="", idle_seconds=FOLLOW_IDLE_SECONDS):
    """Hashes path as its ranges land (ranges_record), reporting into out about once a second; an error when the
    download starts again (fewer bytes landed than read, another file at path, its record gone before the end), its
    run gives up (lease) or it lands nothing for idle_seconds."""
    state = {"pid": os.getpid(), "done": 0, "size": 0, "following": True}
    digest, last, grew = hashlib.sha256(), 0.0, time.monotonic()
    try:
        with open(path, "rb") as handle:
            inode = os.fstat(handle.fileno()).st_ino
            _report(out, state)
            while True:
                landed = _landed(ranges_record)
                if landed is None or os.stat(path).st_ino != inode or landed[0] < state["done"]:
                    raise OSError("the download it followed started again")
                state["size"] = landed[1]
                if state["done"] == landed[1]:
                    break
                if landed[0] == state["done"]:
                    if _given_up(lease):
                        raise OSError("the download it followed was given up")
                    if time.monotonic() - grew > idle_seconds:
                        raise OSError("nothing landed for %d s" % idle_seconds)
                    time.sleep(0.2)
                    continue
                while state["done"] < landed[0]:
                    # read where the bytes are now (no buffer: one read ahead would keep what had not landed yet)
                    block = os.pread(handle.fileno(), min(BLOCK, landed[0] - state["done"]), state["done"])
                    if not block:
                        raise OSError("the file ends before the bytes its download says landed")
                    digest.update(block)
                    state["done"] += len(block)
                grew = time.monotonic()
                if time.monotonic() - last > 1:
                    _report(out, state)
                    last = time.monotonic()
            seen = os.fstat(handle.fileno())
        state["sha256"] = digest.hexdigest()
        state["identity"] = [seen.st_ino, seen.st_size, seen.st_mtime_ns, seen.st_ctime_ns]  # file_identity's form
    except OSError as error:
        state["error"] = str(error)
    _report(out, state)


def _detached(path, out, ranges_record=None, lease=""):
    """Forks; the parent returns at once, the child hashes in a session of its own with no terminal or output."""
    if os.fork():
        return
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for descriptor in (0, 1, 2):
        os.dup2(devnull, descriptor)
    try:
        if ranges_record:
            follow_file(path, out, ranges_record, lease)
        else:
            hash_file(path, out)
    finally:
        os._exit(0)


def start(module, path, out, ranges_record=None, lease=""):
    """Starts hashing path in the background, its report in out (with ranges_record, as the download lands, until its
    run gives up: lease, "FILE:SECONDS"). Returns an error text, or None."""
    source = __loader__.get_source(__name__)  # pylint: disable=undefined-variable  # the module's zip, or this file
    following = [ranges_record, lease] if ranges_record else []
    code, _out, err = module.run_command([sys.executable, "-c", source, path, out] + following)
    return None if code == 0 else (err.strip() or "exit code %d" % code)


def poll(out):
    """The report in out: None when there is none, else its dict with "running" (False when its process is gone
    without a result: killed, or the host restarted)."""
    try:
        with open(out) as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        return None
    running = "sha256" not in state and "error" not in state
    if running:
        try:
            os.kill(int(state["pid"]), 0)
        except (ProcessLookupError, KeyError, ValueError, TypeError):
            running = False
        except PermissionError:  # alive, another user's
            pass
    state["running"] = running
    return state


if __name__ == "__main__":
    _detached(*sys.argv[1:5])
