#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_fetch
short_description: Fetch and verify a model's parts on the master beside the served model, resuming, with progress
version_added: 0.1.0
description:
  - Runs on the master. A model whose parts have a C(src) URL is fetched as a release, a directory of its own in
    O(models_dir) named after the model and its bytes (C(NAME-<12 hex digits>)), beside whatever the master serves. Each
    part is downloaded into C(.incoming/NAME-...) (resumed from the bytes it has with an HTTP C(Range) request, retried
    with back-off), checked against its sha256, and the whole set's headers are read (a part of another set, overlapping
    parts, a type llama.cpp lacks); only then is the directory moved into place, in one step, or with O(place=false)
    left staged (its manifest written) for M(graviton.llama_rpc.model_releases) to place once the set is planned. A
    release is never written again, so a failure at any point leaves every model on the master as it was. A part the
    master already holds verified (in another release) is linked, not fetched.
  - Parts without C(src) are files already on the master (a path model), verified where they are and never changed.
  - A part verified once is not hashed again while its size, modification time and inode stay the same (a record in
    O(state_dir)), unless O(recheck). Hashing runs in a process of its own, so a 200 GB part's hashing reports progress.
  - Before any byte is fetched, the set's size (asked of each source with a one-byte request) is checked against the free
    space. When it is short, releases the switch to this one would remove anyway (O(history), O(keep)) are removed first;
    when that is not enough, it refuses, naming the figures.
  - In check mode it reads no model byte and writes nothing; it asks each missing part's source for its first byte, so a
    source that refuses (no token, a wrong one, a missing part) or a set that cannot fit is found before anything on the
    master changes.
  - Each call works for at most O(step_seconds), then returns what it has done (C(done) false until the release is
    whole); the action plugin of the same name calls it again and prints the progress between calls, and bounds the
    whole transfer. Calls on one master take turns (a lock in O(state_dir)), so one left running by a killed run is
    waited for.
  - Downloads use Ansible's HTTP client (proxies from the environment, the system's CA bundle). A bearer token
    (O(token)) goes to the sources' own host only (not to hosts they redirect to, such as a CDN, nor with an S3 signed
    URL) and never appears in output. URLs are not echoed either (an S3 signed URL grants access to the object).
author:
  - graviton.llama_rpc developers (@graviton)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - graviton.llama_rpc.attributes
  - graviton.llama_rpc.model_releases
options:
  parts:
    description:
      - The parts in order, as the filter M(graviton.llama_rpc.model_parts) gives them. Each has C(number), C(name) (the
        file name it is published under, for messages and checksum files), C(file) (its name on the master), C(sha256)
        (empty when a checksum file gives it, or for an unchecked local file) and either C(src) (an http(s) URL, or an
        s3:// source that O(sources) signs) or C(dest) (the path of a file already on the master).
    type: list
    elements: dict
    required: true
  base_name:
    description: The release's name before its digest. Empty means the first part's file name without C(.gguf) and
      C(-00001-of-0000N).
    type: str
    default: ""
  sources:
    description:
      - URLs that replace the parts' C(src), in order (S3 signed URLs, which grant access to the objects, so they are never
        echoed).
    type: list
    elements: str
    default: []
  sha256sums:
    description:
      - A checksum file in sha256sum's format naming the parts by C(name). An http(s) URL, a path on the master, or an
        s3:// source that O(sha256sums_url) signs. Without O(sha256sums_url), an s3:// one is looked up among the
        releases fetched from the same sources (check mode, before the controller signs anything).
    type: str
    default: ""
  sha256sums_url:
    description: A URL that replaces O(sha256sums) for the download (an S3 signed URL; never echoed).
    type: str
    default: ""
  token:
    description: A bearer token for gated or private sources (Hugging Face access token). Never logged.
    type: str
    default: ""
  read_timeout:
    description: Seconds a read may wait for the next bytes before the attempt counts as failed.
    type: int
    default: 60
  attempts:
    description: Failed attempts in a row, per part, before the download is given up (back-off 2, 4, 8 ... 60 s).
    type: int
    default: 5
  parallel:
    description: Parts downloaded at once.
    type: int
    default: 2
  step_seconds:
    description: Seconds this call may work before it returns its progress (V(0), until everything is verified).
    type: int
    default: 0
  state_dir:
    description: Where the records of verified parts and of the work in progress are kept (root only).
    type: path
    default: /var/lib/llama-rpc-master/fetch
  recheck:
    description: Hash every part again, even those verified before and unchanged since (their files are only read).
    type: bool
    default: false
  place:
    description:
      - Move a verified release into place. V(false) leaves it staged in C(.incoming/NAME) (RV(release.placed) false,
        RV(release.load_path) where llama.cpp can read it there), so that nothing is placed before the set is planned.
    type: bool
    default: true
  lease_file:
    description:
      - A file the caller touches while it waits for this call (the action plugin does, every few seconds, through its
        connection). When its modification time is more than O(lease_seconds) old, or it is gone, the call stops at its
        next block of bytes and returns, so that a run killed on the controller leaves no download going on the master.
        Empty means no lease.
    type: path
    default: ""
  lease_seconds:
    description: How old O(lease_file) may be before this call stops.
    type: int
    default: 15
  run_id:
    description:
      - Failed attempts in a row are counted over the calls that share this id (the action plugin gives each task run
        its own); a call without one counts its own alone.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    details: Reports what it would fetch, verify and remove; fetches, hashes and removes nothing.
"""

EXAMPLES = r"""
- name: Fetch a three-part model, 2 parts at a time, printing progress every 30 s (the action plugin)
  graviton.llama_rpc.model_fetch:
    parts: "{{ 'https://huggingface.co/org/repo/resolve/main/big-00001-of-00003.gguf' | graviton.llama_rpc.model_parts(
               sha256sums='https://huggingface.co/org/repo/resolve/main/SHA256SUMS') | community.general.json_query('parts') }}"
    sha256sums: https://huggingface.co/org/repo/resolve/main/SHA256SUMS
    token: "{{ hf_token }}"
    total_timeout: 14400
  register: fetched

- name: Load it
  ansible.builtin.debug:
    msg: "llama.cpp loads {{ fetched.model_path }}"
"""

RETURN = r"""
done:
  description: Whether every part is in place and verified (for a download, the release is whole).
  returned: always
  type: bool
model_path:
  description: The path llama.cpp loads (the first part's); empty while a download's checksums are not known yet.
  returned: always
  type: str
release:
  description: For a download, the release C(name), C(dir), C(digest) (the sha256 of the parts' sha256s), C(placed) (in
    C(dir), or still staged) and C(load_path) (the first part where it is now); none for a path model, or while its
    checksums are not known yet.
  returned: always
  type: dict
parts:
  description: Per part C(number), C(name), C(path), C(state) (C(verified), C(downloading), C(verifying), C(waiting)),
    C(bytes) (on disk), C(total) (null until known), C(fetched) (bytes this call), C(resumed_from) (bytes it had when
    this call resumed it), C(verified) (C(now), C(record), C(linked) from another release, C(unchecked)).
  returned: always
  type: list
  elements: dict
removed:
  description: Releases removed (or, in check mode, to be removed) to make room for this one.
  returned: always
  type: list
  elements: str
needed_bytes:
  description: Bytes still to download, as the sources told (0 when nothing is).
  returned: always
  type: int
bytes_done:
  description: Bytes on disk and hashed, counted as the progress (download, then hashing).
  returned: always
  type: int
bytes_total:
  description: Bytes to download and hash (known parts only).
  returned: always
  type: int
fetched_bytes:
  description: Bytes downloaded by this call.
  returned: always
  type: int
waiting_for:
  description: Set when another call holds the master's fetch lock (its pid); this call did nothing.
  returned: when another call holds the lock
  type: str
"""

import errno
import hashlib
import json
import os
import threading
import time
from urllib.error import HTTPError

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import gguf, model_arch, model_releases, sha256_job
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.model_download import (
    Refused, Source, fetch_text, refusal, total_of)
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.model_source import parse_sha256sums

CHUNK = 1 << 20
RECORD = model_releases.RECORD
# A hashing process that has written no report this long after it was started never ran: start it again.
HASH_START_SECONDS = 60


def identity(path):
    stat = os.stat(path)
    return [stat.st_size, stat.st_mtime_ns, stat.st_ino]


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


class Fetch:
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

    # ---- verifying ----
    def recorded(self, path, sha256):
        """Whether path holds sha256's bytes by the record (no read), unless recheck."""
        kept = self.record.get(path)
        return (not self.params["recheck"] and kept is not None and os.path.exists(path)
                and kept["identity"] == identity(path) and (not sha256 or kept["sha256"] == sha256))

    def check_hash(self, part, path):
        """None while path is being hashed; else its sha256. Starts the hashing process when needed."""
        start_path = self.hash_report_path(path)
        try:
            with open(start_path) as handle:
                started = json.load(handle)
        except (OSError, ValueError):
            started = None
        report = sha256_job.poll(start_path + ".run")
        if started is not None and (started.get("identity") != identity(path) or (
                report is None and time.time() - started.get("at", 0) > HASH_START_SECONDS)
                or (report is not None and not report["running"] and "sha256" not in report and "error" not in report)):
            started = report = None  # a report of another file at that path, or a process that died without a result
        if started is None:
            if self.check:
                return None
            with open(start_path + ".tmp", "w") as handle:
                json.dump({"path": path, "identity": identity(path), "at": time.time()}, handle)
            os.replace(start_path + ".tmp", start_path)
            if os.path.exists(start_path + ".run"):
                os.unlink(start_path + ".run")
            problem = sha256_job.start(self.module, path, start_path + ".run")
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

    # ---- a download: into its release ----
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
        part["have"] = os.path.getsize(partial) if os.path.exists(partial) else 0
        if os.path.exists(staged):  # named before its record was saved (a run cut short): verified again
            part["have"] = os.path.getsize(staged)

    def link(self, part):
        staged, partial = part["path"], part["path"] + ".partial"
        if "link" in part:
            if os.path.lexists(staged):
                os.unlink(staged)
            os.link(part["link"], staged)
            self.record[staged] = {"identity": identity(staged), "sha256": part["sha256"]}
            self.changed = True
        elif part.get("todo") == "download" and os.path.exists(staged):
            os.replace(staged, partial)

    def ask_sizes(self, parts):
        """Each part to download: its size from its source (one byte asked), or the refusal it answers with."""
        for part in parts:
            try:
                part["total"] = self.source.size(part["src"])
            except HTTPError as error:
                reason = refusal("part %d (%s)" % (part["number"], part["name"]), error, bool(self.params["token"]))
                if reason:
                    raise Refused(reason)
                part["total"] = None  # a passing fault: the download says so, with its retries
            except OSError:
                part["total"] = None  # unreachable now: likewise

    def make_room(self, parts, all_parts, release, staging):
        """Refuses a set that cannot fit before any byte is fetched; removes releases the switch would remove anyway
        when their room is needed."""
        needed = sum(max(0, (part["total"] or 0) - part["have"]) for part in parts)
        self.needed = needed
        free = free_bytes(staging)
        if needed <= free:
            return
        entries, keep = self.params["history"], self.params["keep"]
        releases = model_releases.on_disk(self.models_dir)
        survivors = model_releases.survivors(entries, release, keep)
        kept_files = [path for name in survivors if name in releases
                      for path in model_releases.release_files(self.models_dir, name, releases[name])]
        staying_inodes = {os.stat(path).st_ino for path in kept_files if os.path.exists(path)}
        # not a release the new one takes parts from (linked, not fetched)
        sources = {os.path.basename(os.path.dirname(part["link"])) for part in all_parts if "link" in part}
        reclaim = [name for name in model_releases.reclaimable(releases, entries, release, keep) if name not in sources]
        reclaim_bytes = model_releases.unique_bytes(
            [path for name in reclaim for path in model_releases.release_files(self.models_dir, name, releases[name])
             if os.path.exists(path) and os.stat(path).st_ino not in staying_inodes])
        kept_bytes = {name: model_releases.unique_bytes(model_releases.release_files(self.models_dir, name, releases[name]))
                      for name in survivors if name in releases and name != (entries[0].get("name") if entries else None)}
        problem = model_releases.space_problem(needed, free + reclaim_bytes, staging, kept_bytes)
        if problem:
            raise Refused(problem)
        self.removed, self.changed = reclaim, True
        if not self.check:
            for name in reclaim:
                model_releases.remove(self.models_dir, name)

    def download(self, part):
        partial = part["path"] + ".partial"
        have = os.path.getsize(partial) if os.path.exists(partial) else 0
        part["resumed_from"] = have
        key = part["path"]
        while not self.time_up():
            try:
                with self.source.open(part["src"], have) as response:
                    if have and response.status == 200:  # the server ignored the Range: start again
                        have = 0
                    total = part["total"] = total_of(response, have)
                    with open(partial, "ab" if have else "wb") as handle:
                        while True:
                            block = response.read(CHUNK)
                            if not block:
                                break
                            handle.write(block)
                            have += len(block)
                            with self.lock:
                                part["fetched"] += len(block)
                                part["bytes"] = have
                                self.failures.pop(key, None)  # bytes came: the attempts in a row start again
                                self.changed = True
                            if self.time_up():
                                return  # this call's time is up (or its controller gone): the next one resumes
                if total is not None and have < total:
                    raise OSError("the connection ended %d bytes before the end" % (total - have))
                self.failures.pop(key, None)
                self.finish(part, partial)
                return
            except HTTPError as error:
                if error.code == 416 and have:  # nothing after what it has: complete
                    part["total"] = have
                    self.finish(part, partial)
                    return
                reason = refusal("part %d (%s)" % (part["number"], part["name"]), error, bool(self.params["token"]))
                if reason:
                    raise Refused(reason)
                self.failed_attempt(part, "HTTP %d %s" % (error.code, error.reason))
            except Refused:
                raise
            except (OSError, ValueError) as error:  # URLError and timeouts are OSErrors
                if isinstance(error, OSError) and error.errno == errno.ENOSPC:
                    raise Refused("no space left in %s while part %d (%s) was fetched: something else filled the disk. The "
                                  "%.2f GB fetched are kept there, and the next run resumes. Free space there, or set "
                                  "rpc_master_models_dir to a larger disk."
                                  % (os.path.dirname(partial), part["number"], part["name"], have / 1e9))
                self.failed_attempt(part, str(getattr(error, "reason", error)))
            have = os.path.getsize(partial) if os.path.exists(partial) else 0

    def finish(self, part, partial):
        """A downloaded part: verified, then given its name in the release's place; or refused and removed."""
        part["bytes"] = part["total"] = os.path.getsize(partial)
        outcome = self.verify(part, partial)
        if outcome is None:
            return
        if outcome is not True:
            os.unlink(partial)
            self.record.pop(partial, None)
            raise Refused("part %d (%s) has sha256 %s after its download, not %s (its checksum in %s). It was removed. "
                          "Check the checksum, or the source serves another file." % (
                              part["number"], part["name"], outcome, part["sha256"],
                              "rpc_master_model_sha256sums" if self.params["sha256sums"] else "rpc_master_model_sha256"))
        os.chmod(partial, 0o644)
        os.replace(partial, part["path"])
        self.record[part["path"]] = self.record.pop(partial)
        self.changed = True

    def failed_attempt(self, part, why):
        with self.lock:
            count = self.failures.get(part["path"], 0) + 1
            self.failures[part["path"]] = count
        if count >= self.params["attempts"]:
            raise Refused("part %d (%s) could not be fetched after %d attempts in a row (%s): the master must reach the "
                          "source (a master in a private subnet needs a NAT gateway, or an S3 gateway endpoint). The bytes "
                          "it has are kept: the next run resumes." % (part["number"], part["name"], count, why))
        until = time.monotonic() + min(2 ** count, 60)
        while time.monotonic() < until and not self.time_up():  # the back-off, cut short when the call must stop
            time.sleep(min(1.0, until - time.monotonic()))

    def work(self, part):
        """Bring one part forward until it is verified or the deadline."""
        try:
            if part["state"] == "verified":
                return
            if part.get("todo") == "download":
                partial = part["path"] + ".partial"
                if self.being_hashed(partial):  # downloaded whole, its hashing under way
                    self.finish(part, partial)
                else:
                    part["state"] = "downloading"
                    self.download(part)
            else:  # a file on the master: a path model's, or a release's
                outcome = self.verify(part, part["path"])
                if outcome not in (None, True):
                    raise Refused(part["mismatch"] % outcome)
        except Refused as error:
            part["error"] = str(error)
        except OSError as error:
            part["error"] = "part %d (%s): %s" % (part["number"], part["name"], error)
        if "error" in part:
            self.deadline = time.monotonic()  # the others stop at their next block

    def run_parts(self, parts):
        """Works on the parts, parallel at a time, until each is verified, one fails, or the call's time is up."""
        pending, threads = list(parts), []
        while True:
            threads = [thread for thread in threads if thread.is_alive()]
            while pending and len(threads) < self.params["parallel"] and not self.time_up():
                thread = threading.Thread(target=self.work, args=(pending.pop(0),))
                thread.start()
                threads.append(thread)
            if threads:
                threads[0].join(0.5)
                continue
            unfinished = [part for part in parts if part["state"] in ("downloading", "verifying")]
            if pending or not unfinished or self.time_up() or any("error" in part for part in parts):
                return
            time.sleep(0.2)  # hashers at work, or a download handed back at a block boundary: look again
            pending = unfinished

    # ---- the whole ----
    def checksums(self, parts):
        """Fills each part's sha256 from the checksum file. False when it is in S3 and not signed yet."""
        given = self.params["sha256sums_url"] or self.params["sha256sums"]
        if not given:
            return True
        if "://" in given and not given.startswith(("http://", "https://")):
            return False
        if "://" in given:
            text = fetch_text(self.source, given)
        else:
            with open(given) as handle:
                text = handle.read()
        sums = parse_sha256sums(text)
        missing = [part["name"] for part in parts if part["name"] not in sums]
        if missing:
            raise Refused("rpc_master_model_sha256sums names no part %s: give the checksum file of this model's set."
                          % ", ".join(missing))
        for part in parts:
            part["sha256"] = sums[part["name"]]
        return True

    def find_by_source(self, parts):
        """The release fetched before from these sources (an S3 checksum file not signed yet), if it is whole."""
        key = source_key(parts, self.params["sha256sums"])
        for name, manifest in model_releases.on_disk(self.models_dir).items():
            if manifest.get("source_key") == key:
                return name, manifest
        return None, None

    def fetch(self, parts):
        """The release of a download, whole and verified, or as far as this call gets."""
        base = self.params["base_name"] or gguf.set_base_name(parts[0]["file"])
        if not self.checksums(parts):
            name, manifest = self.find_by_source(parts)
            if name is None and not self.check:
                raise Refused("rpc_master_model_sha256sums is in S3: give its signed URL as sha256sums_url.")
            if name is None:
                return None  # known once the controller has signed the checksum file
            for part, listed in zip(parts, manifest["parts"]):
                part["sha256"] = listed["sha256"]
        name = model_releases.release_name(base, [part["sha256"] for part in parts])
        release_dir = os.path.join(self.models_dir, name)
        staging = os.path.join(self.models_dir, model_releases.INCOMING, name)
        self.release = {"name": name, "dir": release_dir, "digest": model_releases.digest([p["sha256"] for p in parts]),
                        "model_path": os.path.join(release_dir, parts[0]["file"]), "placed": False, "load_path": ""}
        if model_releases.read_manifest(release_dir) is not None:
            self.release.update(placed=True, load_path=self.release["model_path"])
            for part in parts:
                part["path"] = os.path.join(release_dir, part["file"])
            self.check_release(parts, name, release_dir)
            return self.release
        for part in parts:
            part["path"] = os.path.join(staging, part["file"])
        if (model_releases.read_manifest(staging) or {}).get("name") == name:  # verified, staged for its plan
            self.release.update(placed=False, load_path=os.path.join(staging, parts[0]["file"]))
            self.check_release(parts, name, staging)
            if all(part["state"] == "verified" for part in parts) and not self.check:
                self.finish_release(parts, name, staging)
            return self.release
        for part in parts:
            self.prepare(part)
        downloads = [part for part in parts if part.get("todo") == "download"]
        if downloads:
            self.ask_sizes(downloads)
            self.make_room(downloads, parts, name, staging)
        if self.check:
            return self.release
        os.makedirs(staging, mode=0o755, exist_ok=True)
        for part in parts:
            self.link(part)
        self.run_parts(parts)
        if all(part["state"] == "verified" for part in parts) and not self.check:
            self.seal(parts, name, base, staging)
            self.finish_release(parts, name, staging)
        return self.release

    def check_release(self, parts, name, where):
        """A release on disk, placed or staged: its files as they were verified (stat), or hashed again (recheck, or a
        changed file)."""
        self.verify_files(
            parts,
            lambda part: ("the release %s on the master lacks part %d (%s): it was changed by hand. Remove %s (it is "
                          "fetched again), or deploy another model." % (name, part["number"], part["file"], where)),
            lambda part: ("the release %s on the master has changed: part %d (%s) has sha256 %%s, not %s. It is left as it "
                          "is (it may be served): remove %s to fetch it again, or deploy another model."
                          % (name, part["number"], part["file"], part["sha256"], where)))

    def seal(self, parts, name, base, staging):
        """The whole set, verified: its headers read as llama.cpp will read them, then its manifest written (staged)."""
        try:
            model_arch.shape(gguf.read_model(parts[0]["path"]))
        except (OSError, gguf.GGUFError, model_arch.ArchError) as error:
            raise Refused("every part has its checksum, but the set cannot be loaded: %s. The parts are kept in %s (removed "
                          "at the next deploy that switches a model)." % (str(error).rstrip("."), staging))
        manifest = {"name": name, "base": base, "digest": self.release["digest"], "fetched_at": int(time.time()),
                    "source_key": source_key(parts, self.params["sha256sums"]),
                    "parts": [{"file": part["file"], "sha256": part["sha256"], "size": part["total"]} for part in parts]}
        with open(os.path.join(staging, model_releases.MANIFEST + ".partial"), "w") as handle:
            json.dump(manifest, handle)
        os.replace(os.path.join(staging, model_releases.MANIFEST + ".partial"), os.path.join(staging, model_releases.MANIFEST))
        self.changed = True

    def finish_release(self, parts, name, staging):
        """A staged release: moved into place in one step (O(place)), or left staged for its plan."""
        if not self.params["place"]:
            self.release.update(placed=False, load_path=os.path.join(staging, parts[0]["file"]))
            return
        model_releases.place(self.models_dir, name, self.record)
        for part in parts:
            part["path"] = os.path.join(self.release["dir"], part["file"])
        self.release.update(placed=True, load_path=self.release["model_path"])
        self.changed = True

    def run(self):
        """The module's result, and the error that failed it (or None)."""
        params = self.params
        parts = [dict(part, number=int(part["number"]), sha256=str(part.get("sha256") or "").lower(),
                      file=part.get("file") or part["name"], state="waiting", bytes=0, total=None, fetched=0, hashed=0,
                      have=0, path="") for part in params["parts"]]
        for part, source in zip(parts, params["sources"]):
            part["origin"], part["src"] = part.get("src"), source
        downloading = any("://" in str(part.get("src") or "") for part in parts)
        self.release, self.needed = None, 0
        result = dict(changed=False, done=False, model_path="", release=None, removed=[], parts=[], needed_bytes=0,
                      bytes_done=0, bytes_total=0, fetched_bytes=0)
        step = params["step_seconds"]
        self.deadline = time.monotonic() + (step if step > 0 else 10 ** 9)
        if not self.check:
            os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
            holder = self.take_lock()
            if holder is not None:
                result["waiting_for"] = holder
                return result, None
        error = None
        try:
            if downloading:
                release = self.fetch(parts)
                result.update(release=release, model_path=(release or {}).get("model_path", ""))
            else:
                if not any(part["sha256"] for part in parts) and not self.checksums(parts):
                    raise Refused("rpc_master_model_sha256sums is in S3: the controller signs it (sha256sums_url).")
                for part in parts:
                    part["path"] = part["dest"]
                self.verify_files(
                    parts, lambda part: "%s is not on the master." % part["path"],
                    lambda part: ("%s has sha256 %%s, not %s (rpc_master_model_sha256): the file is another model, or "
                                  "damaged. Check the value, or replace the file." % (part["path"], part["sha256"])))
                result["model_path"] = parts[0]["dest"]
        except Refused as refused:
            error = str(refused)
        except OSError as failure:
            error = str(failure)
        self.save()
        errors = ([error] if error else []) + [part["error"] for part in parts if "error" in part]
        if errors and self.release is not None and not self.check:
            try:  # a place of work with nothing in it (refused before its first byte, or its only download removed)
                os.rmdir(os.path.join(self.models_dir, model_releases.INCOMING, self.release["name"]))
            except OSError:
                pass
        work = [part for part in parts if part.get("verified") not in ("record", "linked")]
        total = sum((part["total"] or 0) * (2 if part["sha256"] else 1) for part in work)
        done_bytes = sum(part["bytes"] + (part["hashed"] or 0) for part in work)
        result.update(changed=self.changed, done=not errors and self.release_whole(parts, downloading),
                      removed=self.removed, needed_bytes=self.needed, bytes_done=min(done_bytes, total),
                      bytes_total=total, fetched_bytes=sum(part["fetched"] for part in parts),
                      parts=[{key: part[key] for key in ("number", "name", "path", "state", "bytes", "total", "fetched",
                                                         "hashed", "verified", "resumed_from") if key in part}
                             for part in parts])
        return result, " ".join(errors) or None

    def release_whole(self, parts, downloading):
        if not all(part["state"] == "verified" for part in parts):
            return False
        if not downloading:
            return True
        if self.release is None or not self.release["load_path"]:
            return False
        return model_releases.read_manifest(os.path.dirname(self.release["load_path"])) is not None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            parts=dict(type="list", elements="dict", required=True),
            models_dir=dict(type="path", default="/var/lib/llama-models"),
            base_name=dict(type="str", default=""),
            history=dict(type="list", elements="dict", default=[]),
            keep=dict(type="int", default=1),
            sources=dict(type="list", elements="str", default=[], no_log=True),
            sha256sums=dict(type="str", default=""),
            sha256sums_url=dict(type="str", default="", no_log=True),  # an S3 signed URL: a credential
            token=dict(type="str", default="", no_log=True),
            read_timeout=dict(type="int", default=60),
            attempts=dict(type="int", default=5),
            parallel=dict(type="int", default=2),
            step_seconds=dict(type="int", default=0),
            state_dir=dict(type="path", default="/var/lib/llama-rpc-master/fetch"),
            recheck=dict(type="bool", default=False),
            place=dict(type="bool", default=True),
            lease_file=dict(type="path", default=""),
            lease_seconds=dict(type="int", default=15),
            run_id=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    for part in module.params["parts"]:
        if not part.get("name") or "number" not in part or not (part.get("src") or part.get("dest")):
            module.fail_json(msg="each part needs number, name, and src or dest (graviton.llama_rpc.model_parts gives "
                             "them); got a part with %s" % ", ".join(sorted(key for key in part if key != "src")))
    if module.params["sources"] and len(module.params["sources"]) != len(module.params["parts"]):
        module.fail_json(msg="sources has %d URLs for %d parts" % (len(module.params["sources"]), len(module.params["parts"])))
    if module.params["read_timeout"] < 1 or module.params["attempts"] < 1 or module.params["parallel"] < 1:
        module.fail_json(msg="read_timeout, attempts and parallel must be 1 or more")
    if module.params["keep"] < 0:
        module.fail_json(msg="keep must be 0 or more")
    fetch = Fetch(module)
    try:
        result, error = fetch.run()
    finally:
        if getattr(fetch, "lock_file", None) is not None:
            fetch.lock_file.close()  # the next call, or the next run's, takes its turn
    if error:
        module.fail_json(msg=error, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
