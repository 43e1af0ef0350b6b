# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The parts' transfer into a release: their sizes asked, the disk's room made, each part downloaded (resumed from its
bytes with HTTP Range, retried with back-off), several at once, within one call's step. A part whose source answers
byte ranges comes over several connections at once, each range resumed on its own (fetch_ranges.py keeps them); a
source that does not comes over one. A part of model_fetch (plugins/modules/model_fetch.py), on FetchState's state."""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from urllib.error import HTTPError

from ansible_collections.graviton.llama_rpc.plugins.module_utils.host.file_identity import identity
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import fetch_ranges, gguf, model_arch, model_releases
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.fetch_state import CHUNK, free_bytes
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.model_download import Refused, refusal, total_of


# A header is read ahead from its file's first bytes, this many, then four times more while it runs past them; one that
# runs past HEADER_MOST (no published model's tokenizer comes near) is checked once its part has landed.
HEADER_FIRST_READ = 64 << 10
HEADER_MOST = 64 << 20


class FetchTransfer:
    """Downloading the parts (a mixin of model_fetch's Fetch, over FetchState)."""

    def check_headers_ahead(self, parts):
        """Refuses a set llama.cpp would not load (a part of another set, parts that overlap, a tensor type the pinned
        llama.cpp lacks, an architecture the plan cannot read) from its parts' headers, before any of its data is fetched:
        each part to download read from its first bytes (counted in header_bytes), the others from their files on the
        master. A header it cannot read ahead (a source that does not say its size, or is unreachable for now) leaves the
        check to the set's landing (seal)."""
        read_ahead = {}
        for part in parts:
            if part.get("todo") == "download":
                header = self.header_ahead(part)
                if header is None:
                    return
            else:
                header = gguf.read_header(part.get("link") or part["path"])
            read_ahead[part["file"]] = header
        try:
            model_arch.shape(gguf.read_model(parts[0]["file"], read_ahead=read_ahead))
        except (gguf.GGUFError, model_arch.ArchError) as error:
            raise Refused("the set cannot be loaded, by its parts' headers read ahead of their data: %s. Nothing of it was "
                          "downloaded." % str(error).rstrip("."))

    def header_ahead(self, part):
        """A part's header from its source's first bytes (asked for in growing ranges, each from where the last one
        ended), or None when it cannot be read ahead."""
        data, asked = b"", HEADER_FIRST_READ
        while part["total"]:
            asked = min(asked, part["total"])
            try:
                with self.source.open(part["src"], len(data), last=asked - 1) as response:
                    ranged = response.status == 206
                    if (ranged and fetch_ranges.content_range(response.headers.get("Content-Range"))[0] != len(data)) \
                            or (data and not ranged):
                        return None  # not the bytes asked for (a source that answers no ranges sends the file's start)
                    block = response.read(asked - len(data))
            except HTTPError as error:
                self.raise_if_refused(part, error)
                return None
            except (OSError, ValueError):  # ValueError: a Content-Range that is not one
                return None
            data += block
            self.header_bytes += len(block)
            try:
                return gguf.header_from_bytes(data, part["file"], part["total"])
            except gguf.HeaderIncomplete:
                if len(data) < asked or asked >= min(HEADER_MOST, part["total"]):
                    return None
                asked *= 4
        return None

    def raise_if_refused(self, part, error):
        """Refused, naming the part and the variable to set, when the source's HTTP error is a refusal (a token missing
        or refused, a part it does not have); other errors are passing faults, left to the caller."""
        reason = refusal("part %d (%s)" % (part["number"], part["name"]), error, bool(self.params["token"]))
        if reason:
            raise Refused(reason)

    def ask_sizes(self, parts):
        """Each part to download: its size from its source (one byte asked), whether it answers byte ranges and its
        validator, or the refusal it answers with."""
        for part in parts:
            try:
                found = self.source.probe(part["src"])
                part.update(total=found["total"], ranged=found["ranged"], validator=found["validator"])
            except HTTPError as error:
                self.raise_if_refused(part, error)
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
        state = fetch_ranges.load(partial)
        if state is None and self.ranges_wanted(part, partial):
            state = self.begin_ranges(part, partial, part["total"], part["validator"])
        if state is not None:
            try:
                self.download_ranges(part, partial, state)
                return
            except fetch_ranges.NoRanges:
                part["note"] = "its source answered a byte range with the whole file: fetched over one connection"
                part.pop("connections", None)
                fetch_ranges.forget(partial)
                os.unlink(partial)
                part.pop("resumed_from", None)  # its ranges are dropped: the one stream starts from nothing
        elif self.params["connections"] > 1 and part["total"] and not part.get("ranged"):
            part["note"] = "its source answers no byte ranges: fetched over one connection"
        self.download_stream(part, partial)

    def ranges_wanted(self, part, partial):
        """Whether a part starts as a ranged download: its source answers ranges, it is large enough for two, and no
        download of one stream is under way (that one resumes as it began)."""
        if self.params["connections"] < 2 or not part.get("ranged") or not part["total"]:
            return False
        if len(fetch_ranges.plan(part["total"], self.params["connections"])) < 2:
            return False
        return not (os.path.exists(partial) and os.path.getsize(partial) > 0)

    def download_ranges(self, part, partial, state):
        """A part over several connections: its unfinished ranges, taken in turn by up to `connections` threads, each
        range resumed on its own after a cut. The whole file is verified once every range has landed (finish). A source
        whose file changes under the ranges (another ETag or date) costs an attempt, and the part starts again."""
        part["bytes"] = fetch_ranges.landed(state)
        # what the part had when this call first took it up: a call can take it up again (its last block landed after
        # the hash began, which then reads the file again), and that is still this call's resume
        part.setdefault("resumed_from", part["bytes"])
        self.follow(partial)
        while not self.time_up():
            todo = fetch_ranges.unfinished(state)
            if not todo:
                self.finish(part, partial)  # its record goes once the part is verified: the hash may still follow it
                return
            part["connections"] = min(self.params["connections"], len(todo))
            halt, faults = threading.Event(), []
            descriptor = os.open(partial, os.O_WRONLY)
            try:
                threads = [threading.Thread(target=self.range_worker, args=(part, descriptor, state, todo, halt, faults))
                           for _count in range(part["connections"])]
                for thread in threads:
                    thread.start()
                saved = time.monotonic()
                while any(thread.is_alive() for thread in threads):
                    next(thread for thread in threads if thread.is_alive()).join(0.5)
                    if time.monotonic() - saved > 1:  # the hash follows what it says; a killed call loses this second
                        self.save_ranges(part, partial, state)
                        saved = time.monotonic()
            finally:
                os.close(descriptor)
                self.save_ranges(part, partial, state)
            if faults and not isinstance(faults[0], fetch_ranges.SourceChanged):
                raise faults[0]
            if faults:  # bytes of two files: none is kept
                found = self.source.probe(part["src"])
                if not found["ranged"] or not found["total"]:
                    raise fetch_ranges.NoRanges()
                state = self.begin_ranges(part, partial, found["total"], found["validator"])
                part.update(total=found["total"], validator=found["validator"], bytes=0)
                self.follow(partial)
                self.failed_attempt(part, "the source's file changed during the download (%s): fetched again from its "
                                          "start" % faults[0])

    def begin_ranges(self, part, partial, total, began):
        with self.full_disk_named(part, lambda: 0):
            return fetch_ranges.begin(partial, total, began, self.params["connections"])

    def save_ranges(self, part, partial, state):
        with self.lock, self.full_disk_named(part, lambda: fetch_ranges.landed(state)):
            fetch_ranges.save(partial, state)

    def range_worker(self, part, descriptor, state, todo, halt, faults):
        """One connection: takes the next unfinished range, then half of the largest one another connection is still
        on (so a slow or cut connection does not fetch the end alone), until none is left, the call's time is up, or a
        fault ends the part's ranges (kept in faults; halt stops the other connections)."""
        while not self.time_up() and not halt.is_set():
            with self.lock:
                span = todo.pop(0) if todo else fetch_ranges.split_largest(state)
            if span is None:
                return
            try:
                self.fetch_range(part, descriptor, state, span, halt)
            except (Refused, fetch_ranges.NoRanges, fetch_ranges.SourceChanged) as error:
                with self.lock:
                    faults.append(error)
                halt.set()
                return

    def fetch_range(self, part, descriptor, state, span, halt):
        """Brings one range [first, last, landed] forward, resumed from what has landed, retried with back-off."""
        key = "%s@%d" % (part["path"], span[0])
        while span[2] < span[1] + 1 - span[0] and not self.time_up() and not halt.is_set():
            with self.lock:
                offset, asked = span[0] + span[2], span[1]  # the range may be split after this: it then ends sooner
            try:
                with self.source.open(part["src"], offset, last=asked) as response:
                    if response.status != 206:
                        raise fetch_ranges.NoRanges()
                    answered = fetch_ranges.content_range(response.headers.get("Content-Range"))
                    why = fetch_ranges.changed(state["validator"], fetch_ranges.validator(response.headers))
                    if why is None and answered != (offset, asked, state["total"]):
                        why = "it answered bytes %d-%d of %s for bytes %d-%d of %d" % (
                            answered[0], answered[1], answered[2] or "?", offset, asked, state["total"])
                    if why:
                        raise fetch_ranges.SourceChanged(why)
                    while offset <= span[1]:
                        block = response.read(min(CHUNK, span[1] + 1 - offset))
                        if not block:
                            break
                        with self.lock:  # the range may have been split meanwhile: it ends sooner
                            block = block[:max(0, span[1] + 1 - offset)]
                        with self.full_disk_named(part, lambda: fetch_ranges.landed(state)):
                            os.pwrite(descriptor, block, offset)
                        offset += len(block)
                        with self.lock:
                            span[2] += len(block)
                            part["fetched"] += len(block)
                            part["bytes"] += len(block)
                            self.failures.pop(key, None)
                            self.changed = True
                        if self.time_up() or halt.is_set():
                            return
                if offset <= span[1]:
                    raise OSError("the connection ended %d bytes before its range's end" % (span[1] + 1 - offset))
            except HTTPError as error:
                if error.code == 416:
                    raise fetch_ranges.SourceChanged("it has no bytes %d-%d of a %d-byte file now (HTTP 416)"
                                                     % (offset, span[1], state["total"]))
                self.raise_if_refused(part, error)
                self.failed_attempt(part, "HTTP %d %s" % (error.code, error.reason), key, halt)
            except (Refused, fetch_ranges.NoRanges, fetch_ranges.SourceChanged):
                raise
            except (OSError, ValueError) as error:
                self.failed_attempt(part, str(getattr(error, "reason", error)), key, halt)

    @contextlib.contextmanager
    def full_disk_named(self, part, landed):
        """A full disk within the block is Refused, naming where to free space and the bytes kept (landed())."""
        try:
            yield
        except OSError as error:
            if error.errno == errno.ENOSPC:
                raise Refused(self.disk_full(part, landed()))
            raise

    def disk_full(self, part, have):
        return ("no space left in %s while part %d (%s) was fetched: something else filled the disk. The %.2f GB fetched "
                "are kept there, and the next run resumes. Free space there, or set rpc_master_models_dir to a larger "
                "disk." % (os.path.dirname(part["path"]), part["number"], part["name"], have / 1e9))

    def download_stream(self, part, partial):
        """A part over one connection, resumed from the bytes it has."""
        have = os.path.getsize(partial) if os.path.exists(partial) else 0
        part.setdefault("resumed_from", have)
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
                self.raise_if_refused(part, error)
                self.failed_attempt(part, "HTTP %d %s" % (error.code, error.reason))
            except Refused:
                raise
            except (OSError, ValueError) as error:  # URLError and timeouts are OSErrors
                if isinstance(error, OSError) and error.errno == errno.ENOSPC:
                    raise Refused(self.disk_full(part, have))
                self.failed_attempt(part, str(getattr(error, "reason", error)))
            have = os.path.getsize(partial) if os.path.exists(partial) else 0

    def finish(self, part, partial):
        """A downloaded part: verified, then given its name in the release's place; or refused and removed."""
        part["bytes"] = part["total"] = os.path.getsize(partial)
        outcome = self.verify(part, partial)
        if outcome is None:
            return
        fetch_ranges.forget(partial)  # verified or refused: a ranged download's record has served
        if outcome is not True:
            os.unlink(partial)
            self.record.pop(partial, None)
            raise Refused("part %d (%s) has sha256 %s after its download, not %s (its checksum in %s). It was removed. "
                          "Check the checksum, or the source serves another file." % (
                              part["number"], part["name"], outcome, part["sha256"],
                              "rpc_master_model_sha256sums" if self.params["sha256sums"] else "rpc_master_model_sha256"))
        if self.record[partial]["identity"] != identity(partial):  # written to after its hash: verified again
            self.record.pop(partial)
            part["state"] = "verifying"
            return
        os.chmod(partial, 0o644)
        os.replace(partial, part["path"])
        # the mode and the name are changes of the inode (its status change time): its verified identity is the new one
        self.record.pop(partial)
        self.record[part["path"]] = {"identity": identity(part["path"]), "sha256": part["sha256"]}
        self.changed = True

    def failed_attempt(self, part, why, key=None, halt=None):
        """Counts a failed attempt in a row (per part, or per range: key), and waits its back-off; Refused after the
        last one."""
        key = key or part["path"]
        with self.lock:
            count = self.failures.get(key, 0) + 1
            self.failures[key] = count
        if count >= self.params["attempts"]:
            raise Refused("part %d (%s) could not be fetched after %d attempts in a row (%s): the master must reach the "
                          "source (a master in a private subnet needs a NAT gateway, or an S3 gateway endpoint). The bytes "
                          "it has are kept: the next run resumes." % (part["number"], part["name"], count, why))
        until = time.monotonic() + min(2 ** count, 60)
        # the back-off, cut short when the call must stop or the part's other connections met a fault
        while time.monotonic() < until and not self.time_up() and not (halt and halt.is_set()):
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
        self.part_ended.set()

    def run_parts(self, parts):
        """Works on the parts, parallel at a time, until each is verified, one fails, or the call's time is up."""
        pending, threads = list(parts), []
        self.part_ended = threading.Event()
        while True:
            self.part_ended.clear()  # before looking: a part that ends from here on wakes the wait below
            threads = [thread for thread in threads if thread.is_alive()]
            while pending and len(threads) < self.params["parallel"] and not self.time_up():
                thread = threading.Thread(target=self.work, args=(pending.pop(0),))
                thread.start()
                threads.append(thread)
            if threads:
                # the next part starts as soon as any one ends, not when the first one started does
                self.part_ended.wait(0.5)
                continue
            unfinished = [part for part in parts if part["state"] in ("downloading", "verifying")]
            if pending or not unfinished or self.time_up() or any("error" in part for part in parts):
                return
            time.sleep(0.2)  # hashers at work, or a download handed back at a block boundary: look again
            pending = unfinished
