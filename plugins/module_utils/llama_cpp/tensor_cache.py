# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The RPC workers' tensor cache, as llama.cpp (b11312, ggml-rpc.cpp) uses it, and how this collection fills it.

A worker started with -c keeps every weight tensor over HASH_THRESHOLD that it received in
<LLAMA_CACHE>/rpc/<FNV-1a 64 of the tensor's bytes, 16 lower-case hex digits>, and on a later load answers
the master's SET_TENSOR_HASH from that file instead of receiving the bytes. The bytes are the tensor's
data exactly as it lies in the GGUF file, so the cache can be filled from the file itself.

This module: which tensors of a model (every part of a set) travel by hash (their files, exact sizes and offsets),
and which worker each goes to under a fit plan (the same placement llama.cpp makes). The master fills a worker's cache
through the worker's own RPC server (rpc_protocol.CacheStager), which writes each file as it would in a load.
"""

from __future__ import annotations

import re

HASH_THRESHOLD = 10 * 1024 * 1024  # ggml-rpc.cpp: tensors over this size travel by hash
CACHE_NAME = re.compile(r"^[0-9a-f]{16}$")
_LAYER = re.compile(r"^blk\.(\d+)\.")


def record_digest(tensors):
    """The digest of a record of tensor hashes (gguf_tensor_hashes' .NAME.tensors.json): FNV-1a 64, 16 hex digits, of one
    line "path offset size hash" per tensor in the record's order. The rpc_known_hashes patch computes it again and
    trusts no record whose digest differs (cut short or edited by hand)."""
    value = 0xCBF29CE484222325
    for tensor in tensors:
        for byte in ("%s %d %d %s\n" % (tensor["path"], tensor["offset"], tensor["size"], tensor["hash"])).encode():
            value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % value


def hashed_tensors(model):
    """The tensors llama.cpp sends to workers by hash: [{"name", "path" (its part), "offset" (in that file), "size",
    "layer" (None for the output layer's)}]. Left out: tensors of HASH_THRESHOLD or less (they always travel), the
    multi-token-prediction layers' (not loaded), and token_embd, which stays on the master, unless the model has no
    output.weight: then llama.cpp sends a copy of it to the output layer's worker (tied embeddings)."""
    metadata = model["metadata"]
    arch = metadata.get("general.architecture", "")
    trunk = int(metadata.get("%s.block_count" % arch, 0)) - int(metadata.get("%s.nextn_predict_layers" % arch, 0) or 0)
    tied = not any(tensor["name"] == "output.weight" for tensor in model["tensors"])
    found = []
    for tensor in model["tensors"]:
        layer = _LAYER.match(tensor["name"])
        if tensor["bytes"] <= HASH_THRESHOLD or (layer and int(layer.group(1)) >= trunk):
            continue
        if tensor["name"].startswith("token_embd.") and not (tied and tensor["name"] == "token_embd.weight"):
            continue
        found.append({"name": tensor["name"], "path": tensor["path"], "offset": tensor["file_offset"],
                      "size": tensor["bytes"], "layer": int(layer.group(1)) if layer else None})
    return found


class PlanMismatch(ValueError):
    """A plan that does not place a model's tensors: it was made for another model."""


def assign(tensors, plan):
    """{endpoint: [tensor...]}: the hashed tensors each worker receives under a gguf_plan plan (its "workers":
    name = endpoint, layers [first, last], output). Tensors the master keeps are in no list. A tensor of a layer
    beyond every node's range (the plan was made for a model with fewer layers) raises PlanMismatch."""
    nodes = plan["workers"] + ([plan["master"]] if isinstance(plan.get("master"), dict) else [])
    last_planned = max((node["layers"][1] for node in nodes if node.get("layers")), default=-1)
    unplaced = [tensor["name"] for tensor in tensors if tensor["layer"] is not None and tensor["layer"] > last_planned]
    if unplaced:
        raise PlanMismatch("the plan places layers 0 to %d, and the model has %s: the plan was made for another model. "
                           "Plan this model again (deploy it with rpc_master, which plans the model it loads)."
                           % (last_planned, ", ".join(unplaced[:3]) + (" and %d more" % (len(unplaced) - 3) if len(unplaced) > 3 else "")))
    shares = {worker["name"]: [] for worker in plan["workers"]}
    for tensor in tensors:
        for worker in plan["workers"]:
            first_last = worker["layers"]
            if tensor["layer"] is None:
                holds = worker["output"]
            else:
                holds = bool(first_last) and first_last[0] <= tensor["layer"] <= first_last[1]
            if holds:
                shares[worker["name"]].append(tensor)
                break
    return shares


def staging_sends(request, reports, everything=False):
    """What the master sends each worker before a first load.

    request: {endpoint: [tensor, each with "hash" and "size"]}, the tensors each worker's cache must hold
    (rpc_master_cache_request); reports: {endpoint: {"checked": [hash], "missing": [{"hash", "size"}], "fits",
    "free_bytes", "needed_bytes"}}, what each worker's cache check found (rpc_worker_cache), valid only for the request
    it checked. With everything, the caches are known empty: every tensor of every share is sent.

    Returns {"sends": [{"endpoint", "hashes"}], "unchecked": [endpoint] (a share that no check of this request covers:
    nothing is sent there), "short": [{"endpoint", "free_bytes", "needed_bytes"}] (a cache too small for what it
    lacks)}."""
    sends, unchecked, short = [], [], []
    for endpoint in sorted(request):
        share = request[endpoint]
        if not share:
            continue
        if everything:
            sends.append({"endpoint": endpoint, "hashes": [tensor["hash"] for tensor in share]})
            continue
        report = (reports or {}).get(endpoint)
        if not report or sorted(report.get("checked", [])) != sorted(tensor["hash"] for tensor in share):
            unchecked.append(endpoint)
            continue
        if not report["fits"]:
            short.append({"endpoint": endpoint, "free_bytes": report["free_bytes"], "needed_bytes": report["needed_bytes"]})
        elif report["missing"]:
            sends.append({"endpoint": endpoint, "hashes": [item["hash"] for item in report["missing"]]})
    return {"sends": sends, "unchecked": unchecked, "short": short}
