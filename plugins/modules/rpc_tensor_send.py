#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rpc_tensor_send
short_description: Fill the RPC workers' tensor caches with a model's tensors from the master, all workers at once
version_added: 0.1.0
description:
  - Runs on the master. For each worker, connects to its RPC server (started with C(-c)) and sends it the tensors it
    lacks the way a load sends a tensor the worker has not cached (a C(SET_TENSOR) with the cache flag), streamed
    straight from the model's files (C(sendfile), no copy through Python), one connection per worker, all workers in
    parallel. The worker writes each cache file itself, named by the hash of the bytes it received.
  - Each tensor is then asked back by the name the master expects (C(SET_TENSOR_HASH)); a tensor the worker does not
    find under that name fails the module, by worker and name.
  - The worker's RPC server serves one client at a time, so stop whatever holds it (llama-server) first. The worker
    holds one buffer of the largest tensor's size, and the tensor it receives, while this runs.
  - Returns the bytes and seconds per worker and in all, so the staging rate can be set against the raw network rate.
author:
  - graviton.llama_rpc developers (@graviton)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - graviton.llama_rpc.attributes
options:
  model:
    description: The GGUF model file on the master (a multi-part set's first part); a tensor with a C(path) is read from
      that file (its part).
    type: path
    required: true
  tensors:
    description: The model's hashed tensors, each C(hash), C(path), C(offset) (in that file) and C(size), as
      M(graviton.llama_rpc.gguf_tensor_hashes) returns them.
    type: list
    elements: dict
    required: true
  workers:
    description:
      - Per worker, C(endpoint) (C(host:port), its RPC server) and C(hashes), the tensors to send it.
    type: list
    elements: dict
    required: true
  timeout:
    description: Seconds to wait for a worker to answer (it may still be starting), and for each command.
    type: int
    default: 120
attributes:
  check_mode:
    support: full
    details: Sends nothing.
"""

EXAMPLES = r"""
- name: Stage the tensors each worker is missing
  graviton.llama_rpc.rpc_tensor_send:
    model: /var/lib/llama-models/model.gguf
    tensors: "{{ hashes.tensors }}"
    workers:
      - endpoint: 10.0.1.11:50052
        hashes: [a3ecf9663ee3ef85]
"""

RETURN = r"""
workers:
  description: Per worker, C(endpoint), C(bytes), C(seconds), C(stored) (count).
  returned: always
  type: list
  elements: dict
bytes:
  description: Bytes sent to all workers.
  returned: always
  type: int
seconds:
  description: Wall time of the whole staging (the workers in parallel).
  returned: always
  type: float
"""

import os
import threading
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp.rpc_protocol import REFUSED, CacheStager, ProbeError


def connect(endpoint, timeout):
    """A worker that has just (re)started may not listen yet: retry a refused connection until the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return CacheStager(endpoint, timeout)
        except ProbeError as error:
            if error.state != REFUSED or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def send_one(model, worker, timeout, results):
    started = time.monotonic()
    outcome = {"endpoint": worker["endpoint"], "bytes": 0, "stored": 0}
    files = {}
    try:
        stager = connect(worker["endpoint"], timeout)
        try:
            stager.allocate(max(int(item["size"]) for item in worker["tensors"]))
            lost = []
            for item in worker["tensors"]:
                path = item.get("path") or model
                if path not in files:
                    files[path] = open(path, "rb")
                if stager.stage(files[path], int(item["offset"]), int(item["size"]), item["hash"]):
                    outcome["stored"] += 1
                else:
                    lost.append(item["hash"])
                outcome["bytes"] += int(item["size"])
            if lost:
                outcome["error"] = ("the worker does not find %d of the tensors sent under their names (%s): is its cache "
                                    "directory writable and its disk not full? Read its journal" % (len(lost), ", ".join(lost[:5])))
        finally:
            stager.close()
    except (OSError, ValueError, ProbeError) as error:
        outcome["error"] = str(error)
    finally:
        for handle in files.values():
            handle.close()
    outcome["seconds"] = round(time.monotonic() - started, 3)
    results.append(outcome)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            model=dict(type="path", required=True),
            tensors=dict(type="list", elements="dict", required=True),
            workers=dict(type="list", elements="dict", required=True),
            timeout=dict(type="int", default=120),
        ),
        supports_check_mode=True,
    )
    params = module.params
    by_hash = {tensor["hash"]: tensor for tensor in params["tensors"]}
    workers = []
    for worker in params["workers"]:
        if "endpoint" not in worker or not isinstance(worker.get("hashes"), list):
            module.fail_json(msg="each worker needs endpoint (host:port) and hashes (a list); got %r" % (worker,))
        unknown = [name for name in worker["hashes"] if name not in by_hash]
        if unknown:
            module.fail_json(msg="%s: no tensor of the model has the hash %s" % (worker["endpoint"], ", ".join(unknown)))
        if not worker["hashes"]:
            continue
        # in file order: the model is read front to back, part after part
        tensors = sorted((by_hash[name] for name in worker["hashes"]),
                         key=lambda tensor: (tensor.get("path") or "", int(tensor["offset"])))
        workers.append({"endpoint": worker["endpoint"], "tensors": tensors})
    if module.check_mode:
        module.exit_json(changed=bool(workers), workers=[], bytes=0, seconds=0.0)
    if not os.path.isfile(params["model"]):
        module.fail_json(msg="model %s does not exist on this host" % params["model"])
    results, threads = [], []
    started = time.monotonic()
    for worker in workers:
        thread = threading.Thread(target=send_one, args=(params["model"], worker, params["timeout"], results))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    seconds = round(time.monotonic() - started, 3)
    total = sum(outcome["bytes"] for outcome in results)
    results.sort(key=lambda outcome: outcome["endpoint"])
    failed = [outcome for outcome in results if outcome.get("error")]
    if failed:
        reasons = "; ".join("%s: %s" % (outcome["endpoint"], outcome["error"]) for outcome in failed)
        module.fail_json(msg="staging failed for %s" % reasons, workers=results, bytes=total, seconds=seconds)
    module.exit_json(changed=total > 0, workers=results, bytes=total, seconds=seconds,
                     mbit_per_s=round(total * 8 / seconds / 1e6, 1) if seconds else None)


if __name__ == "__main__":
    main()
