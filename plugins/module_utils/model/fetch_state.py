# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""model_fetch's state on the master: what it recorded as verified (the record), the hashing it started, the failed
attempts of a transfer, its lock and its lease. The module (plugins/modules/model_fetch.py) is FetchState, FetchHoldings
(fetch_holdings.py: what the master holds, verified) and FetchTransfer (fetch_transfer.py: the parts' download)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time

from ansible_collections.graviton.llama_rpc.plugins.module_utils.host.file_identity import identity
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import model_releases
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.model_download import Source

CHUNK = 1 << 20
RECORD = model_releases.RECORD
# A hashing process that has written no report this long after it was started never ran: start it again.
HASH_START_SECONDS = 60


def source_key(parts, sha256sums):
    """The sources a release came from, hashed (a URL may carry a credential): how an S3 checksum file, which only the
    controller can sign, finds its release in check mode."""
    return hashlib.sha256(json.dumps([[part.get("origin") or part.get("src") or "" for part in parts],
                                      sha256sums]).encode()).hexdigest()


def hash_report_path(state_dir, path):
    """Where the hashing of path is recorded (its start; with .run, the hashing process's report)."""
    return os.path.join(state_dir, "%s.sha256.json" % hashlib.sha256(path.encode()).hexdigest()[:16])


def free_bytes(directory):
    while not os.path.isdir(directory):
        directory = os.path.dirname(directory)
    stat = os.statvfs(directory)
    return stat.f_bavail * stat.f_frsize


class FetchState:
    """The state a fetch keeps on the master, and the limits of one call (its step, its lease)."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.check = module.check_mode
        self.state_dir = self.params["state_dir"]
        self.models_dir = self.params["models_dir"]
        self.lock = threading.Lock()
        self.source = Source(self.params["token"], self.params["read_timeout"])
        self.record = self._load(RECORD)
        # failed attempts in a row, per part, over the calls of one transfer (run_id): a new run starts at none
        kept = self._load("attempts.json")
        run_id = self.params["run_id"]
        self.failures = kept.get("counts", {}) if run_id and kept.get("run") == run_id else {}
        self.changed = False
        self.removed = []
        self.deadline = 0.0
        self.abandoned = False  # the controller's lease ran out: nobody waits for this call's result
        self.lock_file = None

    # ---- state on disk ----

    def _load(self, name):
        try:
            with open(os.path.join(self.state_dir, name)) as handle:
                value = json.load(handle)
            return value if isinstance(value, dict) else {}
        except (OSError, ValueError):
            return {}

    def save(self):
        if self.check:
            return
        self.record = {path: kept for path, kept in self.record.items() if os.path.exists(path)}
        for name in os.listdir(self.state_dir):  # the hashing of a file removed since (a fetch's place cleared)
            if name.endswith(".sha256.json"):
                started = self._load(name)
                if started.get("path") and not os.path.exists(started["path"]):
                    for leftover in (name, name + ".run"):
                        if os.path.exists(os.path.join(self.state_dir, leftover)):
                            os.unlink(os.path.join(self.state_dir, leftover))
        for name, data in ((RECORD, self.record), ("attempts.json", {"run": self.params["run_id"], "counts": self.failures})):
            path = os.path.join(self.state_dir, name)
            with open(path + ".tmp", "w") as handle:
                json.dump(data, handle)
            os.replace(path + ".tmp", path)

    def time_up(self):
        """Whether this call must stop: its step is over, or the controller that called it stopped renewing its lease
        (a run killed: no download outlives it by more than the lease)."""
        if time.monotonic() >= self.deadline:
            return True
        lease = self.params["lease_file"]
        if lease:
            try:
                fresh = time.time() - os.stat(lease).st_mtime < self.params["lease_seconds"]
            except OSError:
                fresh = False
            if not fresh:
                self.deadline = time.monotonic()
                self.abandoned = True
                return True
        return False

    def take_lock(self):
        """The master's fetch lock, or the pid that holds it after waiting up to a step."""
        self.lock_file, holder = model_releases.fetch_lock(self.state_dir, min(self.params["step_seconds"] or 60, 60))
        return holder

    def hash_report_path(self, path):
        return hash_report_path(self.state_dir, path)

    def being_hashed(self, path):
        """Whether path, as it is now (size, time, inode), was handed to hashing: a report about an earlier file at
        that path (a download since cut and resumed, a place of work cleared) says nothing about this one."""
        started = self._load(os.path.basename(self.hash_report_path(path)))
        return os.path.exists(path) and started.get("identity") == identity(path)
