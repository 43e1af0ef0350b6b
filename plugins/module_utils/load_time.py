# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How long the first load of a model through llama.cpp's RPC workers takes, and what bounds it.

How a load travels (llama.cpp b11312, ggml/src/ggml-rpc/ggml-rpc.cpp and src/llama-model-loader.cpp):
the loader hands each weight tensor, whole and in file order, to set_tensor. For a tensor over
HASH_THRESHOLD (10 MiB) the master first hashes it (FNV-1a 64, byte by byte, one core) and asks the
worker with SET_TENSOR_HASH, waiting for the answer. On a hit the worker copies its cache file into
place; on a miss the master sends the data, and a worker started with -c hashes it again and writes
it to its cache (a buffered write) before copying it. Smaller tensors always travel. One connection
per worker: the workers are filled one after another.

So per tensor the network transfer is serial with everything, and the master's next read-and-hash
overlaps the worker storing the previous tensor. Summed over the model:

    load = transfer + max(master, workers) + tensors x per-tensor cost

    master  = bytes not in its page cache / its disk read rate + bytes from page cache / memory rate
              + hashed bytes / hash rate                  (read, then hash: the loader reads a tensor whole)
    workers = cold:   hashed bytes / hash rate + what the write-back cannot hide / disk write rate
              staged, warm: hashed bytes / cache read rate (the worker's disk, or its page cache)
    transfer = bytes sent / the rate of one TCP flow

A worker's buffered writes run at memory speed until its dirty-page budget is full; after that
they run at its disk's rate. Its disk keeps writing back while the master serves the other workers,
so a worker's phase only waits for what exceeds the budget plus what its disk writes meanwhile.

Every figure that goes in is named in FIGURES with where it comes from: measured on the project's
machines, or an AWS document. predict() returns the parts, the total and the resource that bounds it.
"""

from __future__ import annotations

MB = 1e6
GB = 1e9
MIB = 1 << 20
GIB = 1 << 30
HASH_THRESHOLD = 10 * MIB  # ggml-rpc.cpp: only tensors over this travel by hash

# name: (value, unit, source). Rates in bytes per second.
FIGURES = {
    "hash_rate": (0.75 * GB, "B/s", "measured here: llama.cpp's byte-serial FNV-1a 64 (gcc -O2) on one core "
                  "(make bench-load: llama-rpc-cache hash over a page-cached file, bytes per user CPU-second: 0.75 GB/s)"),
    "page_cache_rate": (40 * GB, "B/s", "measured here: touching every page of a page-cached file through mmap, as "
                        "the loader maps the model (make bench-load: 42 GB/s)"),
    "per_tensor_s": (0.0002, "s", "measured here: load time of a model of many small tensors over loopback RPC, "
                     "divided by its tensor count (make bench-load: 0.20 ms)"),
    "gp3_baseline_rate": (125 * MIB, "B/s", "AWS: gp3 throughput 125 to 1,000 MiB/s, 125 without provisioning "
                          "(https://docs.aws.amazon.com/emr/latest/APIReference/API_VolumeSpecification.html, "
                          "https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html)"),
    "gp3_max_rate": (1000 * MIB, "B/s", "the same pages: gp3's maximum provisioned throughput, 1,000 MiB/s"),
    "flow_rate": (5e9 / 8, "B/s", "AWS EC2 instance network bandwidth: one TCP flow 5 Gbps outside a cluster placement "
                  "group (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-network-bandwidth.html)"),
    "flow_rate_placement_group": (10e9 / 8, "B/s", "the same page: up to 10 Gbps per flow inside a cluster placement group"),
    "dirty_fraction": (0.20, "of memory", "Linux vm.dirty_ratio default 20%: buffered writes beyond it wait for the disk "
                       "(https://docs.kernel.org/admin-guide/sysctl/vm.html)"),
}


def figure(name):
    return FIGURES[name][0]


def predict(model_bytes, hashed_bytes, tensors, workers, master, network_rate, state):
    """The first load of a model split across workers.

    model_bytes:  bytes of the weights that go to the workers
    hashed_bytes: the part of them in tensors over HASH_THRESHOLD (travels by hash)
    tensors:      how many weight tensors go to the workers
    workers:      [{"bytes": share of model_bytes, "memory": RAM bytes, "disk_read": B/s, "disk_write": B/s,
                    "cache_in_memory": bool}] (cache_in_memory: its cache files are in its page cache)
    master:       {"disk_read": B/s, "cached_bytes": bytes of the model in its page cache}
    network_rate: one TCP flow, B/s
    state:        "cold" (empty caches, workers with -c), "nocache" (workers without -c),
                  "staged" or "warm" (every hashed tensor is in the worker's cache)

    Returns {"seconds", "bound", "parts": {"master_read", "master_hash", "transfer", "workers", "per_tensor"},
             "bytes_sent"}.
    """
    if state not in ("cold", "nocache", "staged", "warm"):
        raise ValueError("state must be cold, nocache, staged or warm, not %r" % (state,))
    hash_rate, memory_rate = figure("hash_rate"), figure("page_cache_rate")
    share = [worker["bytes"] / float(model_bytes) if model_bytes else 0.0 for worker in workers]
    hit = state in ("staged", "warm")
    bytes_sent = model_bytes - hashed_bytes if hit else model_bytes

    cached = min(master.get("cached_bytes", 0), model_bytes)
    master_read = (model_bytes - cached) / master["disk_read"] + cached / memory_rate
    master_hash = hashed_bytes / hash_rate
    transfer = bytes_sent / network_rate

    worker_seconds = 0.0
    for worker, fraction in zip(workers, share):
        hashed = hashed_bytes * fraction
        if hit:
            rate = memory_rate if worker.get("cache_in_memory") else worker["disk_read"]
            worker_seconds += hashed / rate
        elif state == "cold":
            # Its own phase lasts at least as long as the master's share; the disk writes back meanwhile.
            phase = (master_read + master_hash) * fraction + transfer * fraction
            budget = figure("dirty_fraction") * max(worker["memory"] - worker["bytes"], 0)
            unhidden = max(hashed - budget - phase * worker["disk_write"], 0.0)
            worker_seconds += hashed / hash_rate + unhidden / worker["disk_write"]
    per_tensor = tensors * figure("per_tensor_s")
    master_seconds = master_read + master_hash
    parts = {"master_read": master_read, "master_hash": master_hash, "transfer": transfer,
             "workers": worker_seconds, "per_tensor": per_tensor}
    total = transfer + max(master_seconds, worker_seconds) + per_tensor
    if worker_seconds > master_seconds:
        bound = "the workers' cache " + ("reads" if hit else "writes and hashing")
    elif master_read >= master_hash:
        bound = "the master's model read (%s)" % ("its disk" if cached < model_bytes else "page cache")
    else:
        bound = "the master's hashing (FNV-1a on one core)"
    if transfer > max(master_seconds, worker_seconds):
        bound = "the network (one TCP flow per worker)"
    return {"seconds": round(total, 1), "bound": bound, "parts": {key: round(value, 1) for key, value in parts.items()},
            "bytes_sent": int(bytes_sent)}


def for_plan(header, plan, tensors_by_worker, figures, state):
    """predict() for a gguf_plan plan: the bytes and tensors each worker receives, from the model's header.

    tensors_by_worker: {endpoint: [hashed tensor...]} (tensor_cache.assign); figures: {"master_disk_read",
    "master_cached_bytes", "network_rate", "worker_disk_read", "worker_disk_write"} in bytes (per second).
    """
    workers = []
    for worker in plan["workers"]:
        # its usable memory stands for its RAM: a smaller dirty-page budget, so a cautious cold estimate
        workers.append({"bytes": worker["weights_bytes"], "memory": worker["usable_bytes"],
                        "disk_read": figures["worker_disk_read"], "disk_write": figures["worker_disk_write"]})
    model_bytes = sum(worker["bytes"] for worker in workers)
    hashed = sum(tensor["size"] for share in tensors_by_worker.values() for tensor in share)
    sent_tensors = sum(1 for tensor in header["tensors"] if not tensor["name"].startswith("token_embd"))
    master = {"disk_read": figures["master_disk_read"], "cached_bytes": figures.get("master_cached_bytes", 0)}
    return predict(model_bytes, hashed, sent_tensors, workers, master, figures["network_rate"], state)
