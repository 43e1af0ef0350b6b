# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The parts' transfer into a release: their sizes asked, the disk's room made, each part downloaded (resumed from its
bytes with HTTP Range, retried with back-off), several at once, within one call's step. A part of model_fetch
(plugins/modules/model_fetch.py), on FetchState's state."""

from __future__ import annotations

import errno
import os
import threading
import time
from urllib.error import HTTPError

from ansible_collections.graviton.llama_rpc.plugins.module_utils.host.file_identity import identity
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import model_releases
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.fetch_state import CHUNK, free_bytes
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.model_download import Refused, refusal, total_of


class FetchTransfer:
    """Downloading the parts (a mixin of model_fetch's Fetch, over FetchState)."""

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
