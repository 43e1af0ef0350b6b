#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rpc_tensor_cache
short_description: Check and prune a llama.cpp RPC worker's tensor cache, and say what it lacks
version_added: 0.1.0
description:
  - Runs on an RPC worker. Its tensor cache (C(-c)) holds weight tensors as files named by the FNV-1a 64 hash of
    their bytes, and llama.cpp trusts a file's bytes when the master asks for its hash. This module makes that trust
    deserved and keeps the cache bounded.
  - Makes O(dir) a directory owned by O(owner), mode 0700 (whoever can write it can plant weights).
  - Hashes every file of O(wanted) that is there with O(tool) (at disk speed) and removes those whose bytes do not match
    their name (truncated, altered), so a later load fetches them again. A file verified before and not touched since
    (same inode, size, modification and change time) is not hashed again.
  - With O(prune), removes cache files that are neither in O(wanted) nor in O(keep), and half-written ones.
  - Returns what is missing, and whether it fits in the cache's free space. The master fills it through the worker's
    own RPC server (M(graviton.llama_rpc.rpc_tensor_send)), which names each file by the hash of its bytes.
author:
  - graviton.llama_rpc developers (@graviton)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - graviton.llama_rpc.attributes
options:
  dir:
    description: The directory llama.cpp keeps the cache in (C($LLAMA_CACHE/rpc)).
    type: path
    required: true
  owner:
    description: The worker's service user, who owns the cache.
    type: str
    required: true
  tool:
    description: The C(llama-rpc-cache) program of the llama_build role's build.
    type: path
    required: true
  wanted:
    description: The tensors this worker should hold, each C(hash) (16 hex digits) and C(size) (bytes).
    type: list
    elements: dict
    required: true
  keep:
    description: More cache file names to keep (the tensors of other models the cluster serves).
    type: list
    elements: str
    default: []
  prune:
    description: Remove cache files neither wanted nor kept.
    type: bool
    default: true
  verify:
    description: Hash the wanted files that are there and remove those that do not match their name.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: Reports what it would remove.
"""

EXAMPLES = r"""
- name: Check the cache and find what is missing
  graviton.llama_rpc.rpc_tensor_cache:
    dir: /var/cache/llama-rpc-worker/main/rpc
    owner: llama-rpc
    tool: /opt/llama.cpp/current/bin/llama-rpc-cache
    wanted: [{hash: a3ecf9663ee3ef85, size: 16777216}]
  register: cache
"""

RETURN = r"""
missing:
  description: The wanted tensors not in the cache (after removing bad files), C(hash) and C(size).
  returned: always
  type: list
  elements: dict
present_bytes:
  description: Bytes of the wanted tensors that are in the cache and verified.
  returned: always
  type: int
removed:
  description: Cache files removed, each with why (C(mismatch), C(unused), C(partial), C(changed), written to while it was
    verified).
  returned: always
  type: list
  elements: dict
free_bytes:
  description: Free space in the cache's file system.
  returned: always
  type: int
needed_bytes:
  description: Bytes the missing tensors take.
  returned: always
  type: int
fits:
  description: Whether the missing tensors fit in the free space.
  returned: always
  type: bool
"""

import json
import os
import pwd

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.graviton.llama_rpc.plugins.module_utils.host.file_identity import stat_identity
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp.tensor_cache import CACHE_NAME

RECORD = ".verified.json"  # what was verified, and the file state it was verified in


def write_record(path, record):
    with open(path + ".tmp", "w") as handle:
        json.dump(record, handle)
    os.replace(path + ".tmp", path)


def hash_file(module, tool, path):
    """llama.cpp's name for the file's bytes (FNV-1a 64), from the llama-rpc-cache helper; None if it cannot read it."""
    code, out, _err = module.run_command([tool, "hash", path])
    return out.split()[0] if code == 0 and out.strip() else None


def ensure_dir(module, path, owner):
    """The cache directory (and its parent, the instance's CacheDirectory) owned by the worker, 0700."""
    changed = False
    account = pwd.getpwnam(owner)
    for directory in (os.path.dirname(path), path):
        if not os.path.isdir(directory):
            changed = True
            if not module.check_mode:
                os.makedirs(directory, mode=0o700, exist_ok=True)
        if os.path.isdir(directory):
            stat = os.stat(directory)
            if (stat.st_uid, stat.st_gid, stat.st_mode & 0o777) != (account.pw_uid, account.pw_gid, 0o700):
                changed = True
                if not module.check_mode:
                    os.chown(directory, account.pw_uid, account.pw_gid)
                    os.chmod(directory, 0o700)
    return changed


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dir=dict(type="path", required=True),
            owner=dict(type="str", required=True),
            tool=dict(type="path", required=True),
            wanted=dict(type="list", elements="dict", required=True),
            keep=dict(type="list", elements="str", default=[]),
            prune=dict(type="bool", default=True),
            verify=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    wanted = {}
    for item in params["wanted"]:
        if not CACHE_NAME.match(str(item.get("hash", ""))) or int(item.get("size", -1)) <= 0:
            module.fail_json(msg="each wanted tensor needs hash (16 lower-case hex digits) and size (bytes); got %r" % (item,))
        wanted[item["hash"]] = int(item["size"])
    bad_keep = [name for name in params["keep"] if not CACHE_NAME.match(name)]
    if bad_keep:
        module.fail_json(msg="keep holds names that are no cache file names: %s" % ", ".join(bad_keep))
    try:
        pwd.getpwnam(params["owner"])
    except KeyError:
        module.fail_json(msg="owner %s is no user on this host: run the rpc_worker role first" % params["owner"])
    if not os.access(params["tool"], os.X_OK) and not module.check_mode:
        module.fail_json(msg="%s is not there: run the llama_build role on this host first" % params["tool"])

    changed = ensure_dir(module, params["dir"], params["owner"])
    directory = params["dir"]
    record_path = os.path.join(directory, RECORD)
    try:
        with open(record_path) as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        record = {}
    new_record, removed, present_bytes = {}, [], 0
    keep = set(params["keep"])

    names = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
    for name in names:
        path = os.path.join(directory, name)
        why = None
        if name.endswith(".partial") and CACHE_NAME.match(name[1:-len(".partial")] if name.startswith(".") else ""):
            why = "partial"
        elif not CACHE_NAME.match(name):
            continue  # not a cache file (our record, or something of the user's): left alone
        elif name in wanted:
            stat = os.stat(path)
            if stat.st_size != wanted[name]:
                why = "mismatch"
            elif params["verify"] and record.get(name) != stat_identity(stat):
                if hash_file(module, params["tool"], path) != name:
                    why = "mismatch"
                elif stat_identity(os.stat(path)) != stat_identity(stat):
                    why = "changed"  # written to while it was hashed: its bytes are vouched for by nothing
            if why is None:
                new_record[name] = stat_identity(stat)
                present_bytes += stat.st_size
        elif params["prune"] and name not in keep:
            why = "unused"
        else:  # kept unlooked-at (another served model's, or a call that does not prune): its verification stands
            if record.get(name) == stat_identity(os.stat(path)):
                new_record[name] = record[name]
        if why:
            removed.append({"name": name, "why": why})
            if not module.check_mode:
                os.unlink(path)
    if removed:
        changed = True
    if not module.check_mode and os.path.isdir(directory) and new_record != record:
        write_record(record_path, new_record)

    present = set(new_record) & set(wanted)
    missing = [{"hash": name, "size": size} for name, size in sorted(wanted.items()) if name not in present]
    stat = os.statvfs(directory) if os.path.isdir(directory) else os.statvfs("/")
    result = dict(missing=missing, present_bytes=present_bytes, removed=removed, free_bytes=stat.f_bavail * stat.f_frsize,
                  needed_bytes=sum(item["size"] for item in missing))
    result["fits"] = result["needed_bytes"] <= result["free_bytes"]
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()
