# Installed by the graviton.llama_rpc collection (role rpc_worker): a deploy overwrites changes made here.
"""Removes tensor cache files whose bytes do not hash to their name, before a load can trust them.

A worker started with -c writes each weight tensor it receives to <cache>/<FNV-1a 64 of its bytes> and, on later
loads, sends that file's bytes to the tensor whatever its length (llama.cpp's get_cached_file checks neither). It
writes without checking the result: when the disk fills up, the file is left short, the worker goes on (the tensor
itself is whole in memory), and the next load, after any restart of llama-server, would fill the tensor from the short
file: wrong weights and no error. This looks at every file the worker has closed (settled for SETTLE seconds),
hashes it with the collection's cache tool, and removes a file that does not match, saying in the journal what
filled the disk and what to free. The next load then sends that tensor again.

What it found whole it keeps in a state file beside the cache (STATE_FILE: each file's size, modification and change
time and inode), so that a start hashes only what was written since: a start of a stopped worker reads its cache once,
for the load, not twice. The worker's unit runs it once before the worker starts (GUARD_ONCE=1, every file closed):
a file a killed worker left short is gone before a load can ask for it.

It runs at idle priority (CPU and I/O): it only takes what the worker leaves. Settings come from the environment.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

CACHE_NAME = re.compile(r"^[0-9a-f]{16}$")


def log(message):
    print(message, flush=True)


def mount_point(path):
    path = os.path.realpath(path)
    while path != "/" and os.stat(path).st_dev == os.stat(os.path.dirname(path)).st_dev:
        path = os.path.dirname(path)
    return path


def size_text(count):
    if count < 1024:
        return "%d B" % count
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        count /= 1024.0
        if count < 1024 or unit == "TiB":
            return "%.1f %s" % (count, unit)


def tool_hasher(cache_tool):
    """A file's FNV-1a 64 as llama.cpp names cache files, by the collection's cache tool (None when it cannot read the
    file: it changed or went)."""
    def fnv_hash(path):
        run = subprocess.run([cache_tool, "hash", path], capture_output=True, text=True, check=False)
        return run.stdout.split()[0] if run.returncode == 0 and run.stdout else None
    return fnv_hash


def file_state(seen):
    """What tells a file changed without reading it: size, modification and status change time, inode. The fields of
    the collection's file_identity.stat_identity (module_utils/host), which this daemon cannot import (a unit test
    keeps them the same), in the order this daemon's state file has always kept them."""
    return (seen.st_size, seen.st_mtime_ns, seen.st_ctime_ns, seen.st_ino)


class Guard:
    """Finds the closed cache files whose bytes do not hash to their name, and removes them; a file found whole is
    not hashed again until it changes, also across restarts when a state file is given."""

    def __init__(self, cache_dir, fnv_hash, settle, state_file=None):
        self.cache_dir, self.fnv_hash, self.settle, self.state_file = cache_dir, fnv_hash, settle, state_file
        self.verified = self._load()  # name -> file_state() of the file found whole

    def _load(self):
        try:
            with open(self.state_file) as handle:
                return {name: tuple(state) for name, state in json.load(handle).items()}
        except (TypeError, OSError, ValueError, AttributeError):  # none given, none yet, or unreadable: hash again
            return {}

    def _save(self):
        if not self.state_file:
            return
        partial = self.state_file + ".partial"
        with open(partial, "w") as handle:
            json.dump(self.verified, handle)
        os.replace(partial, self.state_file)

    def sweep(self, now=None):
        """One look at the cache: [(name, size, bytes and count of the whole files left)] of the files removed."""
        try:
            entries = [entry for entry in os.scandir(self.cache_dir) if CACHE_NAME.match(entry.name) and entry.is_file()]
        except FileNotFoundError:  # the worker makes it when it starts
            entries = []
        # every file of this look, before any is hashed: the report's totals do not depend on the order of the listing
        removed, present, before = [], {entry.name for entry in entries}, dict(self.verified)
        for entry in entries:
            try:
                seen = entry.stat()
            except FileNotFoundError:
                continue
            state = file_state(seen)
            if self.verified.get(entry.name) == state or (now or time.time()) - seen.st_mtime < self.settle:
                continue  # known whole, or still being written
            digest = self.fnv_hash(entry.path)
            try:
                again = os.stat(entry.path)
            except FileNotFoundError:
                continue
            if file_state(again) != state or digest is None:
                continue  # it changed while hashed: the next pass looks again
            if digest == entry.name:
                self.verified[entry.name] = state
                continue
            os.remove(entry.path)
            self.verified.pop(entry.name, None)
            present.discard(entry.name)
            whole = [self.verified[name][0] for name in self.verified if name in present]
            removed.append((entry.name, seen.st_size, sum(whole), len(whole)))
        kept = {name: state for name, state in self.verified.items() if name in present}
        if kept != before:
            self._save()
        self.verified = kept
        return removed


def report(cache_dir, name, size, cache_bytes, cache_files):
    usage = shutil.disk_usage(cache_dir)
    mount = mount_point(cache_dir)
    return ("Removed the tensor cache file %s (%s): its bytes do not hash to its name, so the next load would have "
            "filled a tensor with them. Most likely the disk filled up while the worker wrote it: %s (holding %s) has %s "
            "free of %s, and the tensor cache holds %s in %d files. Free space on %s (or give the cache a larger disk "
            "with rpc_worker_cache_dir); until then the loads send the tensors that do not fit, and each load is as "
            "slow as a first one." % (name, size_text(size), mount, cache_dir, size_text(usage.free),
                                      size_text(usage.total), size_text(cache_bytes), cache_files, mount))


def main(environ=None):
    environ = os.environ if environ is None else environ
    cache_dir = environ["CACHE_DIR"]  # the worker's tensor cache: <LLAMA_CACHE>/rpc
    cache_tool = environ["CACHE_TOOL"]  # llama-rpc-cache, built with llama.cpp by the llama_build role
    interval = float(environ.get("GUARD_INTERVAL", "2"))
    settle = float(environ.get("GUARD_SETTLE", "2"))  # the worker writes a file in one go: unchanged this long, it is closed
    state_file = environ.get("STATE_FILE") or None
    if environ.get("GUARD_ONCE") == "1":  # before the worker starts: every file is closed
        guard = Guard(cache_dir, tool_hasher(cache_tool), 0, state_file)
        removed = guard.sweep()
        for found in removed:
            log(report(cache_dir, *found))
        log("checked the tensor cache %s before the worker starts: %d files whole, %d removed"
            % (cache_dir, len(guard.verified), len(removed)))
        return 0
    log("guarding the tensor cache %s: files whose bytes do not hash to their name are removed" % cache_dir)
    guard = Guard(cache_dir, tool_hasher(cache_tool), settle, state_file)
    while True:
        for removed in guard.sweep():
            log(report(cache_dir, *removed))
        time.sleep(interval)


if __name__ == "__main__":
    sys.exit(main())
