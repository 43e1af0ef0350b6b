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
  - In check mode it writes nothing and reads no model weight; it asks each missing part's source for its first byte and
    reads each part's header (its first bytes, V(64 KiB) and more while the header runs past them), so a source that
    refuses (no token, a wrong one, a missing part), a set that cannot fit, and a set llama.cpp would not load (a part
    of another set, a tensor type the pinned llama.cpp lacks) are found before anything on the master changes.
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
  connections:
    description:
      - Connections per part (1 to 64), each fetching its own byte ranges (kept beside the download in
        C(PART.partial.ranges), each resumed on its own after a cut). Every range must come from the file the download
        began with (its ETag and Last-Modified); a source whose file changes meanwhile costs an attempt and the part
        starts again. A source that answers no ranges, or a part smaller than two 8 MiB ranges, comes over one.
    type: int
    default: 1
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
  contains:
    name:
      description: The release's name.
      type: str
    dir:
      description: The directory the release is placed in.
      type: str
    digest:
      description: The sha256 of the parts' sha256s.
      type: str
    placed:
      description: Whether the release is in C(dir); false while it is staged in C(.incoming/NAME).
      type: bool
    load_path:
      description: The first part's path where the release is now, the path llama.cpp loads.
      type: str
parts:
  description: Per part C(number), C(name), C(path), C(state) (C(verified), C(downloading), C(verifying), C(waiting)),
    C(bytes) (on disk), C(total) (null until known), C(fetched) (bytes this run fetched), C(resumed_from) (bytes it had
    when this run first took it up), C(verified) (C(now), C(record), C(linked) from another release, C(unchecked)), and for a
    download C(connections) (its byte ranges fetched at once) or C(note) (why it comes over one connection).
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
  description: Bytes downloaded by this run (every call's).
  returned: always
  type: int
header_bytes:
  description: Bytes of the parts' headers read ahead of their download (check mode).
  returned: always
  type: int
waiting_for:
  description: Set when another call holds the master's fetch lock (its pid); this call did nothing.
  returned: when another call holds the lock
  type: str
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import fetch_ranges, gguf, model_arch, model_releases
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.fetch_holdings import FetchHoldings
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.fetch_state import FetchState, source_key
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.fetch_transfer import FetchTransfer
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.model_download import Refused, fetch_text
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.model_source import parse_sha256sums


# what the result says of each part
PART_FIELDS = ("number", "name", "path", "state", "bytes", "total", "fetched", "hashed", "verified", "resumed_from",
               "connections", "note")


class Fetch(FetchState, FetchHoldings, FetchTransfer):
    """One call: the checksums, what the master holds, what to download, the release sealed and placed. Its parts:
    module_utils/model/fetch_state.py, fetch_holdings.py, fetch_transfer.py."""

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
            if downloads:  # the run's look before it changes anything (its room is found): the set's headers too
                self.check_headers_ahead(parts)
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
        self.release, self.needed, self.header_bytes = None, 0, 0
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
                      bytes_total=total, fetched_bytes=sum(part["fetched"] for part in parts), header_bytes=self.header_bytes,
                      parts=[{key: part[key] for key in PART_FIELDS if key in part} for part in parts])
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
            connections=dict(type="int", default=1),
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
    if not 1 <= module.params["connections"] <= fetch_ranges.MOST_CONNECTIONS:
        module.fail_json(msg="connections must be from 1 to %d (per part), not %d"
                         % (fetch_ranges.MOST_CONNECTIONS, module.params["connections"]))
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
