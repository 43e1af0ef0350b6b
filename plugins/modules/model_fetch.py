#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_fetch
short_description: Fetch and verify a model's parts on the master, resuming, with progress
version_added: 0.1.0
description:
  - Runs on the master. For each part of a model (one file or every part of a multi-part set), makes sure its C(dest)
    holds the publisher's bytes. A part with a C(src) URL is downloaded into C(dest).partial, resumed from the bytes it
    has with an HTTP C(Range) request (S3 signed URLs honour them too), retried with back-off, and renamed to C(dest)
    only when its sha256 is the one asked for. A part without C(src) is a file already on the master, only verified.
  - A part verified once is not hashed again while its size, modification time and inode stay the same (a record in
    O(state_dir)), unless O(recheck). Hashing runs in a process of its own, so a 200 GB model's hashing reports progress
    like its download.
  - In check mode it reads no model byte and writes nothing; it asks each missing part's source for one byte, so a
    source that refuses (no token, a wrong one, a missing part) is found before anything on the master changes.
  - Each call works for at most O(step_seconds), then returns what it has done (C(done) false until every part is
    verified); the action plugin of the same name calls it again and prints the progress between calls (bytes,
    percent, rate, time left), and bounds the whole transfer.
  - A bearer token (O(token)) is sent to the sources' host only (not to hosts they redirect to, such as a CDN, nor
    with an S3 signed URL) and never appears in output. URLs are not echoed either (an S3 signed URL grants access to the object).
author:
  - graviton.llama_rpc developers (@graviton)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - graviton.llama_rpc.attributes
options:
  parts:
    description:
      - The parts in order, each C(number), C(name) (the file name it is published under, for messages and checksum
        files), C(dest) (the path on the master), C(sha256) (empty when a checksum file gives it, or for an unchecked
        local file) and, to download it, C(src) (an http(s) URL; a path there means the file is on the master already).
    type: list
    elements: dict
    required: true
  sources:
    description:
      - URLs that replace the parts' C(src), in order (S3 signed URLs, which grant access to the objects, so they are never echoed).
    type: list
    elements: str
    default: []
  sha256sums:
    description:
      - A checksum file in sha256sum's format naming the parts by C(name), at an http(s) URL or a path on the master.
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
    description: Hash every part again, even those verified before and unchanged since.
    type: bool
    default: false
  run_id:
    description:
      - Failed attempts in a row are counted over the calls that share this id (the action plugin gives each task run
        its own); a call without one counts its own alone.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    details: Reports what it would fetch and verify; fetches and hashes nothing.
"""

EXAMPLES = r"""
- name: Fetch a three-part model, 2 parts at a time, printing progress every 30 s (the action plugin)
  graviton.llama_rpc.model_fetch:
    parts:
      - {number: 1, name: big-00001-of-00003.gguf, dest: /var/lib/llama-models/big-00001-of-00003.gguf,
         src: "https://huggingface.co/org/repo/resolve/main/big-00001-of-00003.gguf", sha256: ""}
      - {number: 2, name: big-00002-of-00003.gguf, dest: /var/lib/llama-models/big-00002-of-00003.gguf,
         src: "https://huggingface.co/org/repo/resolve/main/big-00002-of-00003.gguf", sha256: ""}
      - {number: 3, name: big-00003-of-00003.gguf, dest: /var/lib/llama-models/big-00003-of-00003.gguf,
         src: "https://huggingface.co/org/repo/resolve/main/big-00003-of-00003.gguf", sha256: ""}
    sha256sums: https://huggingface.co/org/repo/resolve/main/SHA256SUMS
    token: "{{ hf_token }}"
    total_timeout: 14400
  no_log: false
"""

RETURN = r"""
done:
  description: Whether every part is in place and verified.
  returned: always
  type: bool
parts:
  description: Per part C(number), C(name), C(dest), C(state) (C(verified), C(downloading), C(verifying), C(waiting)),
    C(bytes) (on disk), C(total) (null until known), C(fetched) (bytes this call), C(resumed_from) (bytes it had when
    this call resumed it), C(verified) (hashed this call, or from the record).
  returned: always
  type: list
  elements: dict
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
"""

import errno
import hashlib
import json
import os
import sys
import threading
import time
from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit
from urllib.request import HTTPRedirectHandler, Request, build_opener

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model_source import parse_sha256sums

CHUNK = 1 << 20
RECORD = "verified.json"
# The hashing process: reads a file once, writes its progress and at the end its sha256 (atomically, as JSON).
HASHER = """
import hashlib, json, os, sys, time
path, out = sys.argv[1], sys.argv[2]
def report(state):
    with open(out + ".tmp", "w") as handle:
        json.dump(state, handle)
    os.replace(out + ".tmp", out)
digest, done, last, size = hashlib.sha256(), 0, 0.0, os.path.getsize(path)
try:
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(8 << 20), b""):
            digest.update(block)
            done += len(block)
            if time.monotonic() - last > 1:
                report({"done": done, "size": size})
                last = time.monotonic()
    report({"done": done, "size": size, "sha256": digest.hexdigest()})
except OSError as error:
    report({"done": done, "size": size, "error": str(error)})
"""


# Starts the hasher in a session of its own, its output nowhere, and returns at once (run_command waits for this alone).
LAUNCHER = """
import subprocess, sys
subprocess.Popen([sys.executable, "-c"] + sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
"""


class Refused(Exception):
    """A failure no retry will mend (the source refused, a wrong checksum, a full disk): the message says what to do."""


class SameHostAuthorization(HTTPRedirectHandler):
    """Follow redirects, sending the token to the source's host only (Hugging Face redirects to a CDN)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urlsplit(newurl).hostname != urlsplit(req.full_url).hostname:
            new.remove_header("Authorization")
        return new


def identity(path):
    stat = os.stat(path)
    return [stat.st_size, stat.st_mtime_ns, stat.st_ino]


class Fetch:
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.state_dir = self.params["state_dir"]
        self.record_path = os.path.join(self.state_dir, RECORD)
        self.lock = threading.Lock()
        self.opener = build_opener(SameHostAuthorization)
        try:
            with open(self.record_path) as handle:
                self.record = json.load(handle)
        except (OSError, ValueError):
            self.record = {}
        # failed attempts in a row, per part, over the calls of one transfer (run_id): a new run starts at none
        self.attempts_path = os.path.join(self.state_dir, "attempts.json")
        try:
            with open(self.attempts_path) as handle:
                kept = json.load(handle)
        except (OSError, ValueError):
            kept = {}
        self.failures = kept.get("counts", {}) if kept.get("run") == self.params["run_id"] and self.params["run_id"] else {}
        self.changed = False

    # ---- state on disk ----
    def save(self):
        if self.module.check_mode:
            return
        for path, data in ((self.record_path, self.record),
                           (self.attempts_path, {"run": self.params["run_id"], "counts": self.failures})):
            with open(path + ".tmp", "w") as handle:
                json.dump(data, handle)
            os.replace(path + ".tmp", path)

    def hash_state_path(self, dest):
        return os.path.join(self.state_dir, "%s.sha256.json" % hashlib.sha256(dest.encode()).hexdigest()[:16])

    # ---- HTTP ----
    def request(self, url, offset=0, probe=False):
        headers = {"User-Agent": "graviton.llama_rpc model_fetch"}
        if probe:
            headers["Range"] = "bytes=0-0"
        elif offset:
            headers["Range"] = "bytes=%d-" % offset
        # not to a signed URL (S3's): it carries its own credentials, and S3 refuses a request with two
        if self.params["token"] and "X-Amz-Signature=" not in url:
            headers["Authorization"] = "Bearer %s" % self.params["token"]
        return self.opener.open(Request(url, headers=headers), timeout=self.params["read_timeout"])

    def refusal(self, what, error):
        """The message for an HTTP error no retry mends, or None. what: "part 2 (NAME)", "the checksum file"."""
        if error.code in (401, 403):
            if self.params["token"]:
                return ("the source refused %s with the token given (HTTP %d): rpc_master_model_token has no access to "
                        "it. Check the token's read access to the repository, and accept the model's terms on its page "
                        "with the token's account." % (what, error.code))
            return ("the source refused %s (HTTP %d): a gated or private model needs rpc_master_model_token (for "
                    "Hugging Face an access token with read access, its account having accepted the model's terms); an "
                    "S3 object needs the controller's credentials to allow s3:GetObject." % (what, error.code))
        if error.code == 404:
            return ("%s is not at its source (HTTP 404): check rpc_master_model_src (the set's name and its number of "
                    "parts) and rpc_master_model_sha256sums." % what)
        return None

    def fetch_text(self, url):
        try:
            with self.request(url) as response:
                return response.read(1 << 22).decode("utf-8", errors="replace")
        except HTTPError as error:
            raise Refused(self.refusal("the checksum file (rpc_master_model_sha256sums)", error)
                          or "rpc_master_model_sha256sums could not be fetched: HTTP %d" % error.code)
        except (URLError, OSError) as error:
            raise Refused("rpc_master_model_sha256sums could not be fetched: %s" % getattr(error, "reason", error))

    # ---- one part ----
    def verified(self, part):
        """Whether dest holds the expected bytes, from the record (no read) unless recheck."""
        dest = part["dest"]
        if not os.path.exists(dest):
            return False
        kept = self.record.get(dest)
        return (not self.params["recheck"] and kept is not None and kept["identity"] == identity(dest)
                and (not part["sha256"] or kept["sha256"] == part["sha256"]))

    def check_hash(self, part, path):
        """None while the hasher runs; True when path's sha256 is the expected one. Starts the hasher if needed."""
        state_path = self.hash_state_path(path)
        try:
            with open(state_path) as handle:
                state = json.load(handle)
        except (OSError, ValueError):
            state = None
        if state is not None and state.get("identity") != identity(path):
            state = None  # a report of another file at that path
        if state is None:
            if self.module.check_mode:
                part["state"] = "verifying"
                return None
            with open(state_path + ".tmp", "w") as handle:
                json.dump({"identity": identity(path), "done": 0, "size": os.path.getsize(path)}, handle)
            os.replace(state_path + ".tmp", state_path)
            code, _out, err = self.module.run_command([sys.executable, "-c", LAUNCHER, HASHER, path, state_path + ".run"])
            if code != 0:
                raise Refused("cannot start hashing %s: %s" % (path, err.strip()))
            part["hashed"] = 0
            return None
        try:
            with open(state_path + ".run") as handle:
                run = json.load(handle)
        except (OSError, ValueError):
            run = {"done": 0}
        part["hashed"] = run.get("done", 0)
        if "error" in run:
            os.unlink(state_path)
            raise Refused("cannot read %s to verify it: %s" % (path, run["error"]))
        if "sha256" not in run:
            return None
        for leftover in (state_path, state_path + ".run"):
            os.unlink(leftover)
        if run["sha256"] != part["sha256"]:
            return run["sha256"]
        return True

    def finish(self, part, path):
        """A complete file at path (dest, or dest.partial): verify it and put it in place. Returns False when its
        bytes are not the ones asked for (the caller decides), True when done or verifying."""
        if part["sha256"]:
            outcome = self.check_hash(part, path)
            if outcome is None:
                part["state"] = "verifying"
                return True
            if outcome is not True:
                part["mismatch"] = outcome
                return False
        if path != part["dest"]:
            os.chmod(path, 0o644)
            os.replace(path, part["dest"])
            self.changed = True
        self.record[part["dest"]] = {"identity": identity(part["dest"]), "sha256": part["sha256"]}
        part["state"] = "verified"
        part["hashed"] = part["total"] if part["sha256"] else 0
        part["verified"] = "now" if part["sha256"] else "unchecked"
        return True

    def wrong_download(self, part, path):
        os.unlink(path)
        raise Refused("part %d (%s) has sha256 %s after its download, not %s (its checksum in %s). It was removed. Check "
                      "the checksum, or the source serves another file." % (
                          part["number"], part["name"], part["mismatch"], part["sha256"],
                          "rpc_master_model_sha256sums" if self.params["sha256sums"] else "rpc_master_model_sha256"))

    def download(self, part):
        partial = part["dest"] + ".partial"
        have = os.path.getsize(partial) if os.path.exists(partial) else 0
        part["resumed_from"] = have
        key = part["dest"]
        while time.monotonic() < self.deadline:
            try:
                with self.request(part["src"], have) as response:
                    if have and response.status == 200:  # the server ignored the Range: start again
                        have = 0
                    length = response.headers.get("Content-Length")
                    ranged = response.headers.get("Content-Range", "")
                    total = int(ranged.rsplit("/", 1)[1]) if "/" in ranged and not ranged.endswith("*") else (
                        have + int(length) if length is not None else None)
                    part["total"] = total
                    self.check_space(part, total, have)
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
                            if time.monotonic() >= self.deadline:
                                return  # this call's time is up: the next one resumes
                if total is not None and have < total:
                    raise OSError("the connection ended %d bytes before the end" % (total - have))
                self.failures.pop(key, None)
                if not self.finish(part, partial):
                    self.wrong_download(part, partial)
                return
            except HTTPError as error:
                if error.code == 416 and have:  # nothing after what it has: complete
                    part["total"] = have
                    if not self.finish(part, partial):
                        self.wrong_download(part, partial)
                    return
                reason = self.refusal("part %d (%s)" % (part["number"], part["name"]), error)
                if reason:
                    raise Refused(reason)
                self.failed_attempt(part, "HTTP %d %s" % (error.code, error.reason))
            except Refused:
                raise
            except (URLError, OSError, ValueError) as error:
                if isinstance(error, OSError) and error.errno == errno.ENOSPC:
                    raise Refused("no space left in %s for part %d (%s): free space there, or set rpc_master_models_dir "
                                  "to a larger disk." % (os.path.dirname(part["dest"]), part["number"], part["name"]))
                self.failed_attempt(part, str(getattr(error, "reason", error)))
            have = os.path.getsize(partial) if os.path.exists(partial) else 0

    def failed_attempt(self, part, why):
        with self.lock:
            count = self.failures.get(part["dest"], 0) + 1
            self.failures[part["dest"]] = count
        if count >= self.params["attempts"]:
            raise Refused("part %d (%s) could not be fetched after %d attempts in a row (%s): the master must reach the "
                          "source (a master in a private subnet needs a NAT gateway, or an S3 gateway endpoint). The bytes "
                          "it has are kept: the next run resumes." % (part["number"], part["name"], count, why))
        time.sleep(min(2 ** count, 60, max(0.0, self.deadline - time.monotonic())))

    def check_space(self, part, total, have):
        if total is None:
            return
        stat = os.statvfs(os.path.dirname(part["dest"]))
        free = stat.f_bavail * stat.f_frsize
        if total - have > free:
            raise Refused("part %d (%s) needs %.2f GB more in %s, which has %.2f GB free: free space there, or set "
                          "rpc_master_models_dir to a larger disk."
                          % (part["number"], part["name"], (total - have) / 1e9, os.path.dirname(part["dest"]), free / 1e9))

    def work(self, part):
        """Bring one part forward until it is verified or the deadline."""
        try:
            dest, partial = part["dest"], part["dest"] + ".partial"
            if self.verified(part):
                part.update(state="verified", verified="record", bytes=os.path.getsize(dest), total=os.path.getsize(dest))
                return
            if os.path.exists(dest):
                part["bytes"] = part["total"] = os.path.getsize(dest)
                if not part["sha256"] and not part.get("src"):
                    part.update(state="verified", verified="unchecked")
                    return
                if self.finish(part, dest):
                    return
                if not part.get("src"):
                    raise Refused("%s has sha256 %s, not %s (rpc_master_model_sha256): the file is another model, or "
                                  "damaged. Check the value, or replace the file." % (dest, part["mismatch"], part["sha256"]))
                if self.module.check_mode:
                    part["state"] = "waiting"
                    return
                os.unlink(dest)  # an older download under this name: replaced by the one asked for
                self.record.pop(dest, None)
            if not part.get("src"):
                raise Refused("%s is not on the master." % dest)
            if self.module.check_mode:  # does the source answer? (one byte: a refusal is found before any change)
                part["state"] = "waiting"
                try:
                    with self.request(part["src"], probe=True):
                        pass
                except HTTPError as error:
                    reason = self.refusal("part %d (%s)" % (part["number"], part["name"]), error)
                    if reason:
                        raise Refused(reason)
                except (URLError, OSError):
                    pass  # unreachable now: the download says so, with its retries
                return
            if os.path.exists(self.hash_state_path(partial)):  # downloaded, its hashing under way
                part["bytes"] = part["total"] = os.path.getsize(partial)
                if not self.finish(part, partial):
                    self.wrong_download(part, partial)
                return
            part["state"] = "downloading"
            self.download(part)
        except Refused as error:
            part["error"] = str(error)
        except OSError as error:
            part["error"] = "part %d (%s): %s" % (part["number"], part["name"], error)
        if "error" in part:
            self.deadline = time.monotonic()  # the others stop at their next block

    def run(self):
        params = self.params
        if not self.module.check_mode:
            os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        parts = [dict(part, number=int(part["number"]), sha256=str(part.get("sha256") or "").lower(), state="waiting",
                      bytes=0, total=None, fetched=0, hashed=0) for part in params["parts"]]
        for part, source in zip(parts, params["sources"]):
            part["src"] = source
        for part in parts:  # a path: the file is on the master, to verify only
            if "://" not in str(part.get("src") or ""):
                part.pop("src", None)
        if params["sha256sums"]:
            try:
                if "://" in params["sha256sums"]:
                    text = self.fetch_text(params["sha256sums"])
                else:
                    with open(params["sha256sums"]) as handle:
                        text = handle.read()
            except (Refused, OSError) as error:
                self.module.fail_json(msg=str(error))
            sums = parse_sha256sums(text)
            missing = [part["name"] for part in parts if part["name"] not in sums]
            if missing:
                self.module.fail_json(msg="rpc_master_model_sha256sums names no part %s: give the checksum file of this "
                                      "model's set." % ", ".join(missing))
            for part in parts:
                part["sha256"] = sums[part["name"]]
        step = params["step_seconds"]
        self.deadline = time.monotonic() + (step if step > 0 else 10 ** 9)
        pending, threads = list(parts), []
        while True:
            threads = [thread for thread in threads if thread.is_alive()]
            while pending and len(threads) < params["parallel"] and time.monotonic() < self.deadline:
                thread = threading.Thread(target=self.work, args=(pending.pop(0),))
                thread.start()
                threads.append(thread)
            if threads:
                threads[0].join(0.5)
                continue
            unfinished = [part for part in parts if part["state"] in ("downloading", "verifying")]
            if pending or not unfinished or time.monotonic() >= self.deadline or any("error" in part for part in parts):
                break
            time.sleep(0.2)  # hashers at work, or a download handed back at a block boundary: look again
            pending = unfinished
        self.save()
        errors = [part["error"] for part in parts if "error" in part]
        for part in parts:
            part.pop("src", None)
            part.pop("mismatch", None)
        done = all(part["state"] == "verified" for part in parts)
        # progress: the bytes to download, then to hash (a part verified from the record is no work)
        work = [part for part in parts if part.get("verified") != "record"]
        total = sum((part["total"] or 0) * (2 if part["sha256"] else 1) for part in work)
        done_bytes = sum(part["bytes"] + (part["hashed"] or 0) for part in work)
        result = dict(changed=self.changed, done=done, parts=parts, bytes_done=min(done_bytes, total), bytes_total=total,
                      fetched_bytes=sum(part["fetched"] for part in parts))
        if errors:
            self.module.fail_json(msg=" ".join(errors), **result)
        self.module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            parts=dict(type="list", elements="dict", required=True),
            sources=dict(type="list", elements="str", default=[], no_log=True),
            sha256sums=dict(type="str", default="", no_log=True),  # an S3 signed URL: a credential
            token=dict(type="str", default="", no_log=True),
            read_timeout=dict(type="int", default=60),
            attempts=dict(type="int", default=5),
            parallel=dict(type="int", default=2),
            step_seconds=dict(type="int", default=0),
            state_dir=dict(type="path", default="/var/lib/llama-rpc-master/fetch"),
            recheck=dict(type="bool", default=False),
            run_id=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    for part in module.params["parts"]:
        if not part.get("dest") or not part.get("name") or "number" not in part:
            module.fail_json(msg="each part needs number, name and dest (graviton.llama_rpc.model_parts gives them); got "
                             "a part with %s" % ", ".join(sorted(key for key in part if key != "src")))
    if module.params["sources"] and len(module.params["sources"]) != len(module.params["parts"]):
        module.fail_json(msg="sources has %d URLs for %d parts" % (len(module.params["sources"]), len(module.params["parts"])))
    if module.params["read_timeout"] < 1 or module.params["attempts"] < 1 or module.params["parallel"] < 1:
        module.fail_json(msg="read_timeout, attempts and parallel must be 1 or more")
    Fetch(module).run()


if __name__ == "__main__":
    main()
