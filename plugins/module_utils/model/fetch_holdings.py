# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the master already holds of a model: parts verified against their sha256 (hashed once, in a process of its own
that outlives a call; then kept in the record), and links to the same bytes in another release. A part of
model_fetch (plugins/modules/model_fetch.py), on FetchState's state."""

from __future__ import annotations

import json
import os
import time

from ansible_collections.graviton.llama_rpc.plugins.module_utils.host.file_identity import identity
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import fetch_ranges, sha256_job
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.fetch_state import HASH_START_SECONDS
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.model_download import Refused


class FetchHoldings:
    """Verifying and linking what is on the master (a mixin of model_fetch's Fetch, over FetchState)."""

    # ---- verifying ----
    def recorded(self, path, sha256):
        """Whether path holds sha256's bytes by the record (no read), unless recheck."""
        kept = self.record.get(path)
        return (not self.params["recheck"] and kept is not None and os.path.exists(path)
                and kept["identity"] == identity(path) and (not sha256 or kept["sha256"] == sha256))

    def check_hash(self, part, path):
        """None while path is being hashed; else its sha256. Starts the hashing process when needed."""
        start_path = self.hash_report_path(path)
        started = self._load(os.path.basename(start_path)) or None
        report = sha256_job.poll(start_path + ".run")
        if started is not None and "follows" in started:
            # a hash that followed a ranged download holds for the file as it last read it, if it is that file still
            if (report is None or not report["running"]) and (report or {}).get("identity") != identity(path):
                started = report = None  # it stopped short (the download started again, was given up) or the file changed
        elif started is not None and (started.get("identity") != identity(path) or (
                report is None and time.time() - started.get("at", 0) > HASH_START_SECONDS)
                or (report is not None and not report["running"] and "sha256" not in report and "error" not in report)):
            started = report = None  # a report of another file at that path, or a process that died without a result
        if started is None:
            if self.check:
                return None
            problem = self.start_hash(path, {"identity": identity(path)})
            if problem:
                raise Refused("cannot start hashing %s: %s" % (path, problem))
            part["hashed"] = 0
            return None
        part["hashed"] = (report or {}).get("done", 0)
        if report is None or report["running"]:
            return None
        for leftover in (start_path, start_path + ".run"):
            os.unlink(leftover)
        if "error" in report:
            raise Refused("cannot read %s to verify it: %s" % (path, report["error"]))
        return report["sha256"]

    def follow(self, partial):
        """Hashes a ranged download as its bytes land (sha256_job.follow_file), unless a hash already follows it. A hash
        that cannot start is no failure: the file is hashed whole once it has landed."""
        start_path = self.hash_report_path(partial)
        started = self._load(os.path.basename(start_path))
        report = sha256_job.poll(start_path + ".run")
        if started.get("follows") == os.stat(partial).st_ino:
            if report is None and time.time() - started.get("at", 0) < HASH_START_SECONDS:
                return  # started, its first report to come
            if report is not None and (report["running"] or report.get("identity") == identity(partial)):
                return  # under way, or done with the file as it is
        lease = "%s:%d" % (self.params["lease_file"], self.params["lease_seconds"]) if self.params["lease_file"] else ""
        self.start_hash(partial, {"follows": os.stat(partial).st_ino}, fetch_ranges.record_path(partial), lease)

    def start_hash(self, path, about, ranges_record=None, lease=""):
        """Starts the hashing process of path (sha256_job), its start recorded with what it is about (the file's
        identity, or the inode of the download it follows); the report of an earlier one goes. Returns an error text,
        or None."""
        start_path = self.hash_report_path(path)
        with open(start_path + ".tmp", "w") as handle:
            json.dump(dict(about, path=path, at=time.time()), handle)
        os.replace(start_path + ".tmp", start_path)
        if os.path.exists(start_path + ".run"):
            os.unlink(start_path + ".run")
        return sha256_job.start(self.module, path, start_path + ".run", ranges_record, lease)

    def verify(self, part, path):
        """Hashes path against the part's sha256: None while hashing, True when it matches, else the sha256 it has."""
        if self.recorded(path, part["sha256"]):
            part.update(state="verified", verified="record", hashed=0)
            return True
        found = self.check_hash(part, path)
        if found is None:
            part["state"] = "verifying"
            return None
        if found != part["sha256"]:
            return found
        self.record[path] = {"identity": identity(path), "sha256": part["sha256"]}
        part.update(state="verified", verified="now", hashed=os.path.getsize(path))
        return True

    # ---- files on the master: a path model's parts, or a release's ----
    def verify_files(self, parts, missing, mismatch):
        """Each part's file, to verify where it is (never changed): missing % (part, path) and mismatch % (part, path)
        give the refusals (mismatch keeps one %s for the sha256 found)."""
        for part in parts:
            if not os.path.isfile(part["path"]):
                raise Refused(missing(part))
            part["bytes"] = part["total"] = os.path.getsize(part["path"])
            part["mismatch"] = mismatch(part)
            if not part["sha256"]:
                part.update(state="verified", verified="unchecked")
        self.run_parts(parts)

    def linkable(self, sha256):
        """A verified file on the master with these bytes (another release's part), by the record."""
        for path, kept in self.record.items():
            if kept.get("sha256") == sha256 and self.recorded(path, sha256):
                return path
        return None

    def prepare(self, part):
        """What a part of the release needs before any download: verified already, a link to the same bytes in another
        release (part["link"]), or a download. Changes nothing (link() makes the links)."""
        staged, partial = part["path"], part["path"] + ".partial"
        if self.recorded(staged, part["sha256"]):
            size = os.path.getsize(staged)
            part.update(state="verified", verified="record", bytes=size, total=size)
            return
        other = self.linkable(part["sha256"])
        if other is not None:
            size = os.path.getsize(other)
            part.update(state="verified", verified="linked", bytes=size, total=size, link=other)
            return
        part["todo"] = "download"
        ranged = fetch_ranges.load(partial)  # a ranged download's file has its full size from the start
        part["have"] = fetch_ranges.landed(ranged) if ranged else os.path.getsize(partial) if os.path.exists(partial) else 0
        if os.path.exists(staged):  # named before its record was saved (a run cut short): verified again
            part["have"] = os.path.getsize(staged)

    def link(self, part):
        staged, partial = part["path"], part["path"] + ".partial"
        if "link" in part:
            if os.path.lexists(staged):
                os.unlink(staged)
            before = identity(part["link"])
            os.link(part["link"], staged)
            # a link is a change of the inode (its status change time): every verified name of those bytes follows
            after = identity(staged)
            for kept in self.record.values():
                if kept["identity"] == before:
                    kept["identity"] = after
            self.record[staged] = {"identity": after, "sha256": part["sha256"]}
            self.changed = True
        elif part.get("todo") == "download" and os.path.exists(staged):
            fetch_ranges.forget(partial)  # a whole file: verified again as it is, not fetched by ranges
            os.replace(staged, partial)
