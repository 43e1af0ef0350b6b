#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gguf_tensor_hashes
short_description: The names a GGUF model's tensors take in llama.cpp RPC workers' tensor caches
version_added: 0.1.0
description:
  - Runs on the master. Lists the model's weight tensors that travel to RPC workers by hash (over 10 MiB; the token
    embeddings stay on the master unless the model ties them to its output; the multi-token-prediction layers are not
    loaded) with their file, exact offset and size, in every part of a multi-part set, and hashes each the way llama.cpp
    does (FNV-1a 64) with O(tool), at disk speed.
  - The hashes are kept in O(manifest) and reused while every part is unchanged (same inode, size, modification and
    status change time) and none changed after the manifest was written (its status change time, strictly earlier), so
    a re-run reads nothing but the headers. A part's identity is taken before and after its hash; one that changed
    meanwhile is hashed again, and after three tries the module fails rather than write a record of bytes it did not
    hash. The manifest carries a digest of its tensors' lines, so one cut short or edited by hand is not trusted. A
    master built with the collection's patch C(rpc_known_hashes) reads the manifest on the same terms (and checks the
    digest) and sends the workers its hashes instead of reading and hashing their weights.
author:
  - graviton.llama_rpc developers (@graviton)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - graviton.llama_rpc.attributes
options:
  path:
    description: The GGUF model file (a multi-part set's first part).
    type: path
    required: true
  tool:
    description: The C(llama-rpc-cache) program of the llama_build role's build.
    type: path
    required: true
  manifest:
    description: Where the hashes are kept (JSON), for example beside the model.
    type: path
    required: true
  jobs:
    description:
      - How many hashing processes run at once. The tensors, in file order, are cut into runs of about equal bytes, each
        hashed by its own process, so a model in the page cache is hashed at the pace of the host's cores rather than
        one core's (the hash is byte-serial, about 1 GB/s a core).
      - Default, the CPUs this module may run on.
    type: int
attributes:
  check_mode:
    support: full
    details: Hashes (it only reads) but does not write the manifest.
"""

EXAMPLES = r"""
- name: Hash the model's big tensors (once per model file)
  graviton.llama_rpc.gguf_tensor_hashes:
    path: /var/lib/llama-models/model.gguf
    tool: /opt/llama.cpp/current/bin/llama-rpc-cache
    manifest: /var/lib/llama-models/.model.gguf.tensors.json
  register: hashes
"""

RETURN = r"""
tensors:
  description: C(name), C(path) (its part), C(offset) (in that file), C(size), C(layer) (null for the output layer's) and
    C(hash).
  returned: always
  type: list
  elements: dict
hashed_bytes:
  description: The bytes of those tensors.
  returned: always
  type: int
seconds:
  description: Time spent hashing now (0 when the manifest was reused).
  returned: always
  type: float
hash_rate:
  description: Bytes per second hashed now (null when the manifest was reused).
  returned: always
  type: float
"""

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.graviton.llama_rpc.plugins.module_utils.host.file_identity import changed_since, identity
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.gguf import GGUFError, read_model
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp.tensor_cache import hashed_tensors, record_digest

# 2: every part of a set, each tensor with its file; 3: with its digest (record_digest); 4: each part's identity with
# its status change time (file_identity)
MANIFEST_VERSION = 4
HASH_TRIES = 3  # a part that changes under every hash is being written: refused, not recorded


def parts_identity(model):
    return [MANIFEST_VERSION] + [[part["path"]] + identity(part["path"]) for part in model["parts"]]


def hash_runs(tensors, jobs):
    """The tensors cut into runs for `jobs` processes: in file order, a run ends at its part's end or once it holds its
    share of the bytes (a run's ranges are in one file, as the helper takes them, and read in order)."""
    share = max(1, sum(tensor["size"] for tensor in tensors) // jobs)
    runs, held = [], 0
    for tensor in tensors:
        if runs and runs[-1][-1]["path"] == tensor["path"] and held < share:
            runs[-1].append(tensor)
            held += tensor["size"]
        else:
            runs.append([tensor])
            held = tensor["size"]
    return runs


def hash_run(module, tool, run):
    """(the run, its hashes or None, why not) from one llama-rpc-cache process over the run's ranges."""
    ranges = [str(value) for tensor in run for value in (tensor["offset"], tensor["size"])]
    rc, stdout, stderr = module.run_command([tool, "hash", run[0]["path"]] + ranges, expand_user_and_vars=False)
    lines = stdout.splitlines()
    if rc != 0:
        return run, None, stderr.strip() or str(rc)
    if len(lines) != len(run):
        return run, None, "%d hashes for %d tensors" % (len(lines), len(run))
    return run, [line.split()[0] for line in lines], None


def hash_parts(module, tool, tensors, jobs):
    """Sets each tensor's "hash" with the llama-rpc-cache helper, `jobs` processes at once."""
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for run, hashes, problem in pool.map(lambda run: hash_run(module, tool, run), hash_runs(tensors, jobs)):
            if problem is not None:
                module.fail_json(msg="hashing %s failed: %s" % (run[0]["path"], problem))
            for tensor, digest in zip(run, hashes):
                tensor["hash"] = digest


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            tool=dict(type="path", required=True),
            manifest=dict(type="path", required=True),
            jobs=dict(type="int"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    jobs = params["jobs"] if params["jobs"] is not None else len(os.sched_getaffinity(0))
    if jobs < 1:
        module.fail_json(msg="jobs is %d: give how many hashing processes run at once (1 or more), or leave it out for "
                         "one per CPU." % jobs)
    try:
        model = read_model(params["path"])
        before = parts_identity(model)
    except (OSError, GGUFError) as error:
        module.fail_json(msg="cannot read the model: %s" % error)
    try:
        with open(params["manifest"]) as handle:
            kept = json.load(handle)
        # and written after every part's last change (a link, a chmod, a write that kept the time): the patched
        # llama.cpp (rpc_known_hashes) trusts a record only then
        written = os.stat(params["manifest"])
        if (kept.get("identity") == before and kept.get("digest") == record_digest(kept["tensors"])
                and not any(changed_since(os.stat(part["path"]), written) for part in model["parts"])):
            module.exit_json(changed=False, tensors=kept["tensors"], hashed_bytes=sum(t["size"] for t in kept["tensors"]),
                             seconds=0.0, hash_rate=None)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    # checked once here: the processes start from several threads, and each would fail the module on its own
    if not (os.path.isfile(params["tool"]) and os.access(params["tool"], os.X_OK)):
        module.fail_json(msg="the hashing helper %s is not an executable file: give the llama-rpc-cache program of the "
                         "llama_build role's build." % params["tool"])
    started = time.monotonic()
    for _try in range(HASH_TRIES):
        tensors = hashed_tensors(model)
        hash_parts(module, params["tool"], tensors, jobs)
        try:
            if parts_identity(model) == before:
                break
            model = read_model(params["path"])  # its header may be another now
            before = parts_identity(model)
        except (OSError, GGUFError) as error:
            module.fail_json(msg="cannot read the model: %s" % error)
    else:
        module.fail_json(msg="the model's parts (%s) changed while they were hashed, %d times in a row: something writes "
                         "them. Let it finish (a download or a copy), then run again; no record was written."
                         % (params["path"], HASH_TRIES))
    seconds = time.monotonic() - started
    hashed = sum(tensor["size"] for tensor in tensors)
    changed = False
    if not module.check_mode:
        partial = params["manifest"] + ".partial"
        with open(partial, "w") as handle:
            json.dump({"identity": before, "tensors": tensors, "digest": record_digest(tensors)}, handle)
        os.replace(partial, params["manifest"])
        changed = True
    module.exit_json(changed=changed, tensors=tensors, hashed_bytes=hashed, seconds=round(seconds, 3),
                     hash_rate=round(hashed / seconds) if seconds > 0 and hashed else None)


if __name__ == "__main__":
    main()
