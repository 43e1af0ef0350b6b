# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The models a master keeps: releases, which one is served, which are kept for a rollback, which go.

A downloaded model becomes a release: a directory of its own in the models directory, named after the model and its
bytes (NAME-<12 hex digits of the parts' checksums>), holding every part of the set under llama.cpp's names and a
manifest (.release.json). It is fetched and verified beside the served model (in .incoming/NAME, where the manifest is
written once every part is verified and the headers read: a staged release), planned there, and only then moved into
place whole (place()), and never written again: a new model, or new bytes under the same name, is another release. A
set that llama.cpp would not load, or that does not fit, is never placed: it stays staged, as a resumable download. llama-server is switched
to a release by its settings (one file, rewritten at once) and restarted.

The history is the rpc_master role's published list of the models it served, newest first (history[0] is the one
served): each {"name", "model_path", "kind" ("release" or "path"), "cached_hashes"}. rpc_master_models_kept of the
earlier ones are kept, with their tensors in the workers' caches; the rest go after a switch, or before a download
that needs their room.

Only decisions live here (unit-tested); the modules model_fetch and model_releases act on them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import time

MANIFEST = ".release.json"
INCOMING = ".incoming"
RECORD = "verified.json"  # in the fetches' state directory: {path: {"identity", "sha256"}} of every verified file
PREVIOUS = "previous"
LOCK = "fetch.lock"
_NAME = re.compile(r"^(?P<base>.+)-(?P<digest>[0-9a-f]{12})$")


def digest(checksums):
    """The identity of a set's bytes: the sha256 of its parts' sha256s, in order."""
    return hashlib.sha256("\n".join(value.lower() for value in checksums).encode()).hexdigest()


def release_name(base, checksums):
    return "%s-%s" % (base, digest(checksums)[:12])


def is_release_name(name):
    return bool(_NAME.match(name or ""))


def history_after_switch(history, entry):
    """The history once entry is served: entry first, then the others in the order they were served."""
    return [entry] + [item for item in history if item.get("name") != entry.get("name")]


def kept(history, keep):
    """The entries kept for a rollback: the keep most recently served before history[0]."""
    return list(history[1:1 + max(0, int(keep))])


def _names(entries):
    """The release names entries hold: their own, and the release a served path lies in (a path that points into a
    release by hand keeps that release)."""
    names = set()
    for item in entries:
        names.add(item.get("name"))
        if item.get("model_path"):
            names.add(os.path.basename(os.path.dirname(item["model_path"])))
    return names


def survivors(history, new_name, keep):
    """Release names a fetch of new_name must not remove: the one served now (whatever keep says: its files are never
    touched before a switch), new_name, and those the switch to new_name keeps."""
    future = history_after_switch(history, {"name": new_name})
    return _names(history[:1] + future[:1 + max(0, int(keep))])


def resolve(asked, history, releases):
    """The model rpc_master_model_release names: PREVIOUS (the one served before the current one), a release's name,
    or a model's path that was served. releases: the release names on disk. Returns (entry, problem)."""
    on_disk = set(releases)
    listed = ", ".join(item.get("name", "?") for item in history[1:]) or "none"
    if asked == PREVIOUS:
        if len(history) < 2:
            return None, ("rpc_master_model_release=previous: this master has served no model before %s. Set it to the "
                          "name of a release in the models directory, or leave it empty to deploy "
                          "rpc_master_model_src." % (history[0]["name"] if history else "any"))
        entry = history[1]
    else:
        entry = next((item for item in history if item.get("name") == asked), None)
        if entry is None and asked in on_disk:
            entry = {"name": asked, "kind": "release"}
        if entry is None:
            return None, ("rpc_master_model_release=%s is neither a release on this master nor a model it served. Kept for "
                          "a rollback: %s; releases on disk: %s. Set it to one of those, or to previous."
                          % (asked, listed, ", ".join(sorted(on_disk)) or "none"))
    if entry.get("kind", "release") == "release" and entry["name"] not in on_disk:
        return None, ("rpc_master_model_release=%s: that release is no longer on this master (removed when it was no "
                      "longer among the rpc_master_models_kept most recent). Deploy it again from its source "
                      "(rpc_master_model_src), which fetches it." % asked)
    return entry, None


def prunable(releases, history, keep):
    """The release directories to remove once history[0] serves: those not among it and the keep before it."""
    staying = _names(history[:1 + max(0, int(keep))])
    return sorted(name for name in releases if name not in staying)


def reclaimable(releases, history, new_name, keep):
    """The releases a fetch of new_name may remove first when it needs their room: those its switch would remove."""
    staying = survivors(history, new_name, keep)
    return sorted(name for name in releases if name not in staying)


def after_switch(history, entry, keep):
    """What the master publishes once entry serves: {"history": the served models, newest first, entry and the keep
    before it; "cache_keep": the tensors the workers' caches keep for those kept (endpoint -> sorted names)}."""
    future = history_after_switch(history, entry)[:1 + max(0, int(keep))]
    return {"history": future, "cache_keep": cache_keep(future, keep)}


def space_problem(needed, free, directory, kept_bytes):
    """A refusal before any byte is fetched, or None. free: the directory's free bytes plus those of the releases the
    fetch may remove first (reclaimable). kept_bytes: {release name: bytes} of the releases kept for a rollback, which
    stay (lowering rpc_master_models_kept lets a fetch remove them first)."""
    if needed <= free:
        return None
    kept_text = ""
    if kept_bytes:
        kept_text = (" The models kept for a rollback hold %s: lower rpc_master_models_kept to let the fetch remove them "
                     "first." % ", ".join("%s %.2f GB" % (name, size / 1e9) for name, size in sorted(kept_bytes.items())))
    return ("The model needs %.2f GB more in %s, which has %.2f GB free.%s Free space there, or set rpc_master_models_dir "
            "to a larger disk. Nothing was fetched." % (needed / 1e9, directory, free / 1e9, kept_text))


def cache_keep(history, keep):
    """The tensors the workers' caches keep for the models kept for a rollback: endpoint -> sorted cache file names."""
    hashes = {}
    for item in kept(history, keep):
        for endpoint, names in (item.get("cached_hashes") or {}).items():
            hashes.setdefault(endpoint, set()).update(names)
    return {endpoint: sorted(names) for endpoint, names in hashes.items()}


def read_manifest(directory):
    """A release's manifest, or None when directory is not a whole release."""
    try:
        with open(os.path.join(directory, MANIFEST)) as handle:
            manifest = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("parts"), list) or not manifest["parts"]:
        return None
    return manifest


def on_disk(models_dir):
    """{release name: manifest} of the whole releases in models_dir."""
    found = {}
    try:
        names = os.listdir(models_dir)
    except OSError:
        return found
    for name in names:
        path = os.path.join(models_dir, name)
        if is_release_name(name) and os.path.isdir(path) and not os.path.islink(path):
            manifest = read_manifest(path)
            if manifest is not None and manifest.get("name") == name:
                found[name] = manifest
    return found


def as_model(models_dir, entry, manifest=None):
    """A release or a served path as the model_parts filter returns a model on the master (kind path: used in place,
    checked against the checksums it was fetched with)."""
    if entry.get("kind", "release") == "release":
        directory = os.path.join(models_dir, entry["name"])
        parts = [{"number": index + 1, "name": part["file"], "file": part["file"],
                  "dest": os.path.join(directory, part["file"]), "sha256": part["sha256"]}
                 for index, part in enumerate(manifest["parts"])]
        return {"kind": "path", "parts": parts, "model_path": parts[0]["dest"], "base_name": manifest["base"],
                "checksums": "sha256", "problems": [], "release": entry["name"]}
    return None


def unique_bytes(paths):
    """Bytes the files take on disk once, counting each inode once (releases share parts by hard links)."""
    seen, total = set(), 0
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            continue
        if (stat.st_dev, stat.st_ino) not in seen:
            seen.add((stat.st_dev, stat.st_ino))
            total += stat.st_size
    return total


def load_record(state_dir):
    """The fetches' record of verified files ({} when there is none)."""
    try:
        with open(os.path.join(state_dir, RECORD)) as handle:
            record = json.load(handle)
        return record if isinstance(record, dict) else {}
    except (OSError, ValueError):
        return {}


def save_record(state_dir, record):
    path = os.path.join(state_dir, RECORD)
    with open(path + ".tmp", "w") as handle:
        json.dump(record, handle)
    os.replace(path + ".tmp", path)


def staged_dir(models_dir, name):
    return os.path.join(models_dir, INCOMING, name)


def place(models_dir, name, record):
    """Moves the staged release NAME (.incoming/NAME, its manifest written) into place, in one step; record: the
    verified files by path ({path: ...}), whose keys follow the move. False when nothing is staged under that name."""
    staging, release_dir = staged_dir(models_dir, name), os.path.join(models_dir, name)
    manifest = read_manifest(staging)
    if manifest is None or manifest.get("name") != name:
        return False
    if os.path.exists(release_dir):  # a directory a removal left half done (no manifest): not a release
        shutil.rmtree(release_dir)
    os.rename(staging, release_dir)
    for part in manifest["parts"]:
        before = os.path.join(staging, part["file"])
        if before in record:
            record[os.path.join(release_dir, part["file"])] = record.pop(before)
    return True


def release_files(models_dir, name, manifest):
    return [os.path.join(models_dir, name, part["file"]) for part in manifest["parts"]]


def remove(models_dir, name):
    """Removes a release: its manifest first, so a removal cut short leaves a directory that is no release."""
    directory = os.path.join(models_dir, name)
    try:
        os.unlink(os.path.join(directory, MANIFEST))
    except FileNotFoundError:
        pass
    shutil.rmtree(directory, ignore_errors=True)


def fetch_lock(state_dir, wait):
    """(open lock file, None) once this process holds the master's fetch lock, or (None, the holder's pid) after wait
    seconds. Fetches and removals take turns: a fetch left running by a killed run ends within its step."""
    handle = open(os.path.join(state_dir, LOCK), "a+")
    until = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() >= until:
                handle.seek(0)
                holder = handle.read().strip() or "unknown"
                handle.close()
                return None, holder
            time.sleep(0.5)
            continue
        handle.truncate(0)
        handle.write(str(os.getpid()))
        handle.flush()
        return handle, None
