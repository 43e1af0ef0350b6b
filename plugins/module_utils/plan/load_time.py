# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How long the first load of a model through llama.cpp's RPC workers takes, and what bounds it.

How a load travels (llama.cpp b11312, ggml/src/ggml-rpc/ggml-rpc.cpp and src/llama-model-loader.cpp): the loader
hands each weight tensor, whole and in file order, to set_tensor. For a tensor over HASH_THRESHOLD (10 MiB) the master
hashes it (FNV-1a 64, byte by byte, one core) and sends SET_TENSOR_HASH, then waits for the answer. On a hit the worker
has read its cache file into a fresh (zeroed) buffer and copied it into the tensor, on one core, before it answers. On
a miss the master sends the bytes (SET_TENSOR; it waits until they are written to the socket, not for the worker) and
goes on hashing the next tensor, while a worker started with -c receives them into a fresh buffer, hashes them again,
writes its cache file and copies them into the tensor. Smaller tensors always travel. One connection per worker: the
workers are filled one after another.

So, summed over the model:

    load = transfer + master + workers + small tensors + tensors x per-tensor cost
    on a hit, each hashed tensor's steps follow one another (the master waits for the answer before its next hash);
    on a miss, the master's read and hash of the next tensor run while the worker stores the one it received (SET_TENSOR
    has no answer), so those two count once, the longer of them: master + workers becomes
    master's message copies + max(master's read and hash, workers)
    master  = hashed bytes x (1 / read rate + 1 / hash rate), the read from its page cache or its disk; on a miss also
              its copy of each tensor into a fresh message (hashed bytes / worker hit rate: the same work); and the
              read of the weights it keeps itself (its layers, the output, the token embeddings: the loader maps
              the whole file with MAP_POPULATE, src/llama-mmap.cpp); their repacking for its CPU is not modelled
    workers = hit:  hashed bytes / worker hit rate (+ / disk read rate when the cache files are not in its page cache)
              miss: hashed bytes x (1 / hash rate + 1 / worker store rate) + what write-back cannot hide / disk write rate
    transfer = bytes sent / the rate of one TCP flow

A worker's buffered writes run at memory speed until its dirty-page budget is full; after that they run at its
disk's rate, and its disk keeps writing back while the master serves the other workers.

Every figure that goes in is named in FIGURES with where it comes from: measured on the project's machines (make
bench-load measures them again and sets the model's predictions beside measured loads of 1 to 6 GB), or an AWS
document. predict() returns the parts, the total and the resource that bounds it.
"""

from __future__ import annotations

MB = 1e6
GB = 1e9
MIB = 1 << 20
GIB = 1 << 30
HASH_THRESHOLD = 10 * MIB  # ggml-rpc.cpp: only tensors over this travel by hash

# name: (value, unit, source). Rates in bytes per second.
FIGURES = {
    "hash_rate": (1.04 * GB, "B/s", "measured here: llama.cpp's byte-serial FNV-1a 64 (gcc -O2) on one core "
                  "(make bench-load: llama-rpc-cache hash over a page-cached file, bytes per user CPU-second: 1.04 GB/s "
                  "on a quiet machine; 0.75 GB/s was measured beside other work)"),
    "page_cache_rate": (40 * GB, "B/s", "measured here: touching every page of a page-cached file through mmap, as "
                        "the loader maps the model (make bench-load: 42 and 61 GB/s; the lower kept)"),
    "worker_hit_rate": (0.67 * GB, "B/s", "measured here: a real worker's cache hits over RPC, one worker alone, its "
                        "cache files page-cached, on one core (make bench-start measures it in each run)"),
    "worker_store_rate": (0.66 * GB, "B/s", "measured here: the worker's own work per byte of a miss with -c, outside "
                          "its hashing: a zeroed buffer, the bytes copied in, the cache file written (buffered), the copy "
                          "into the tensor (make bench-load, tests/bench/worker_paths.c store: 0.66 GB/s)"),
    "per_tensor_s": (0.0002, "s", "measured here: load time of a model of many small tensors over loopback RPC, "
                     "divided by its tensor count (make bench-load: 0.20 ms)"),
    "gp3_baseline_rate": (125 * MIB, "B/s", "AWS: gp3 throughput 125 to 1,000 MiB/s, 125 without provisioning "
                          "(https://docs.aws.amazon.com/emr/latest/APIReference/API_VolumeSpecification.html, "
                          "https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html)"),
    "gp3_max_rate": (1000 * MIB, "B/s", "the same pages: gp3's maximum provisioned throughput, 1,000 MiB/s"),
    "flow_rate": (5e9 / 8, "B/s", "AWS EC2 instance network bandwidth: one TCP flow 5 Gbps outside a cluster placement "
                  "group (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-network-bandwidth.html)"),
    "flow_rate_placement_group": (10e9 / 8, "B/s", "the same page: up to 10 Gbps per flow inside a cluster placement group"),
    "ec2_start_s": (21.2, "s", "third-party measurement: a stopped EC2 instance from the StartInstances call to its SSH "
                    "port open, m7i.large with Amazon Linux 2023, one run: 1.8 s API call, 16.4 s pending to running, "
                    "3.0 s boot to SSH (https://github.com/brevdev/ec2-coldboot-research/blob/main/docs/"
                    "start-stopped-results.md); not measured on AWS here"),
    "dirty_fraction": (0.20, "of memory", "Linux vm.dirty_ratio default 20%: buffered writes beyond it wait for the disk "
                       "(https://docs.kernel.org/admin-guide/sysctl/vm.html)"),
}


def figure(name):
    return FIGURES[name][0]


def predict(model_bytes, hashed_bytes, tensors, workers, master, network_rate, state, master_bytes=0, hash_threads=1,
            shared_cores=0, known_hashes=False, shared_disk_rate=0):
    """The first load of a model split across workers.

    model_bytes:  bytes of the weights that go to the workers
    hashed_bytes: the part of them in tensors over HASH_THRESHOLD (travels by hash)
    tensors:      how many weight tensors go to the workers
    workers:      [{"bytes": share of model_bytes, "memory": RAM bytes, "disk_read": B/s, "disk_write": B/s,
                    "cache_in_memory": bool}] (cache_in_memory: its cache files are in its page cache)
    master:       {"disk_read": B/s, "cached_bytes": bytes of the model file in its page cache}
    network_rate: one TCP flow, B/s
    state:        "cold" (empty caches, workers with -c), "nocache" (workers without -c),
                  "staged" or "warm" (every hashed tensor is in the worker's cache)
    master_bytes: bytes of the weights the master keeps (0 when every layer and the output go to the workers, but
                  for the token embeddings)
    hash_threads: threads that hash ahead of the loader (the rpc_hash_ahead patch, GGML_RPC_LOAD_THREADS); 1: stock,
                  which hashes on the loader's thread. With more, the master's read and hash of the tensors ahead run
                  on that many cores while the loader waits for a worker, so on a hit too the master's part and the
                  workers' count once, the longer of them.
    shared_cores: when the workers run on the master's own cores (a benchmark on one machine), how many there are:
                  the master's and the workers' CPU work together cannot take less than their sum over those cores; on a
                  hit with hash threads, the threads and the worker share the cores fairly while the hashing lasts.
    known_hashes: the master built with the rpc_known_hashes patch, with a valid record: on a hit it neither reads nor
                  hashes a hashed tensor (the record gives its hash), each worker is filled by a lane of its own (the
                  workers at once, the slowest bounds them), and the master reads what it keeps meanwhile. On a miss
                  the lane reads and sends the bytes, as stock, but the workers still fill at once.
    shared_disk_rate: when the master and the workers read one disk (a benchmark on one machine), its rate: what they
                  read from it together cannot take less than their bytes over that rate.

    Returns {"seconds", "bound", "parts": {"master_read", "master_hash", "transfer", "workers", "per_tensor"},
             "bytes_sent"}.
    """
    if state not in ("cold", "nocache", "staged", "warm"):
        raise ValueError("state must be cold, nocache, staged or warm, not %r" % (state,))
    hash_rate, memory_rate = figure("hash_rate"), figure("page_cache_rate")
    hit_rate, store_rate = figure("worker_hit_rate"), figure("worker_store_rate")
    share = [worker["bytes"] / float(model_bytes) if model_bytes else 0.0 for worker in workers]
    hit = state in ("staged", "warm")
    unhashed = model_bytes - hashed_bytes
    bytes_sent = unhashed if hit else model_bytes

    # The master maps the model and reads each tensor whole, then hashes it: what its page cache holds at memory speed,
    # the rest from its disk (the published 70B load, whose master read from gp3, is explained so).
    file_bytes = model_bytes + master_bytes
    in_memory = min(master.get("cached_bytes", 0), file_bytes) / float(file_bytes) if file_bytes else 1.0
    read_per_byte = in_memory / memory_rate + (1 - in_memory) / master["disk_read"]
    master_own = master_bytes * read_per_byte
    master_read = model_bytes * read_per_byte + master_own
    master_hash = hashed_bytes / hash_rate
    # ahead of the loader, the threads share the page cache's reads and the hashing; a disk reads no faster for them
    threads = max(1, int(hash_threads))
    master_hashed = hashed_bytes * (in_memory / memory_rate / threads + (1 - in_memory) / master["disk_read"]) \
        + master_hash / threads
    master_unhashed = unhashed * read_per_byte
    transfer = bytes_sent / network_rate

    # Each worker, on one core, for its share: a small tensor lands in a zeroed buffer and is copied into place (the
    # hit path's work without the file); a hashed one, on a hit, is read from its cache file into a zeroed buffer and
    # copied into place (from its disk unless its page cache holds the file); on a miss with -c it is received, hashed
    # again, written to a new cache file and copied into place, and writes beyond the dirty-page budget wait for the disk.
    worker_unhashed = unhashed / hit_rate
    worker_hashed = 0.0
    for worker, fraction in zip(workers, share):
        hashed = hashed_bytes * fraction
        if hit:
            worker_hashed += hashed / hit_rate + (0.0 if worker.get("cache_in_memory") else hashed / worker["disk_read"])
        elif state == "cold":
            phase = (master_hashed + transfer) * fraction
            budget = figure("dirty_fraction") * max(worker["memory"] - worker["bytes"], 0)
            unhidden = max(hashed - budget - phase * worker["disk_write"], 0.0)
            worker_hashed += hashed / hash_rate + hashed / store_rate + unhidden / worker["disk_write"]
        else:
            worker_hashed += hashed / hit_rate
    # On a hit the steps of a tensor follow one another: the master's hashing, then the worker's read and copy, then
    # its answer, which the master waits for. On a miss the master hashes, asks, copies the tensor into a fresh message
    # (new uint8_t[]() and memcpy: a hit's work without the file) and sends it; SET_TENSOR has no answer, so the master
    # reads and hashes the next tensor while the worker stores this one, and waits only at the next question
    # (ggml-rpc.cpp: ggml_backend_rpc_buffer_set_tensor, rpc_server::set_tensor). The cold loads measured here (make
    # bench-load, 1 to 6 GB, two runs) were 0.78 to 1.00 of the steps' sum.
    per_tensor = tensors * figure("per_tensor_s")
    if known_hashes:
        return _known_hashes(model_bytes, hashed_bytes, workers, share, master, network_rate, hit, state, master_bytes,
                             in_memory, read_per_byte, per_tensor, shared_cores, shared_disk_rate)
    master_message = 0.0 if hit else hashed_bytes / hit_rate
    # The loader maps the file with MAP_POPULATE (src/llama-mmap.cpp, when no range of it is left lazy): what the master
    # reads from its disk is read before the first tensor is set, so the hash threads' work beside the workers is only
    # the hashing from the page cache after it (make bench-start shows it). The stock path's order is unchanged: on a hit
    # its steps are summed anyway, and on a miss the published loads (a 405B file larger than the master's memory, which
    # no populate holds) fit the overlap.
    populated = hashed_bytes * (1 - in_memory) / master["disk_read"] if threads > 1 else 0.0
    if hit and threads == 1:
        hashed_phase = master_hashed + worker_hashed
    else:
        hashed_phase = populated + master_message + max(master_hashed - populated, worker_hashed)
    unshared = hashed_phase
    if shared_cores and hit and threads > 1:
        # the hash threads and the worker are runnable together and the scheduler shares the cores fairly: each gets
        # cores / (threads + 1) of one until the hashing ends, then the worker has a core of its own for what is left
        share_each = min(1.0, shared_cores / float(threads + 1))
        hashing = (hashed_bytes * in_memory / memory_rate + master_hash) / (threads * share_each)
        worker_left = max(0.0, worker_hashed - share_each * hashing)
        hashed_phase = max(hashed_phase, populated + hashing + worker_left)
    elif shared_cores:
        cpu_work = master_message + hashed_bytes * in_memory / memory_rate + master_hash + worker_hashed
        hashed_phase = max(hashed_phase, populated + cpu_work / shared_cores)
    total = transfer + hashed_phase + master_unhashed + worker_unhashed + per_tensor + master_own
    parts = {"master_read": master_read, "master_hash": master_hash + master_message, "transfer": transfer,
             "workers": worker_hashed + worker_unhashed, "per_tensor": per_tensor}
    caches_read = "copies in memory" if all(w.get("cache_in_memory") for w in workers) else "their disks"
    if transfer >= hashed_phase:
        bound = "the network (one TCP flow per worker)"
    elif hashed_phase > unshared:
        bound = "the cores the master and the workers share (%d)" % shared_cores
    elif hit and threads > 1:
        bound = ("the workers' cache reads (%s), while the master hashes ahead on %d threads" % (caches_read, threads)
                 if worker_hashed >= master_hashed else
                 "the master's hashing ahead on %d threads (FNV-1a, a tensor per thread)" % threads)
    elif hit:
        bound = ("the master's hashing and the workers' cache reads, one after the other (FNV-1a on one core, %s)"
                 % ("the workers' disks" if caches_read == "their disks" else caches_read))
    elif worker_hashed > master_hashed:
        bound = ("the workers (hashing again and storing what they receive, one core each), while the master hashes"
                 if state == "cold" else "the workers (copying what they receive, one core each), while the master hashes")
    elif hashed_bytes * read_per_byte >= master_hash:
        bound = "the master's model read (%s)" % ("its disk" if in_memory < 1 else "page cache")
    else:
        bound = ("the master's hashing (FNV-1a on one core)" if threads == 1 else
                 "the master's hashing ahead on %d threads (FNV-1a, a tensor per thread)" % threads)
    return {"seconds": round(total, 1), "bound": bound, "parts": {key: round(value, 1) for key, value in parts.items()},
            "bytes_sent": int(bytes_sent)}


def _known_hashes(model_bytes, hashed_bytes, workers, share, master, network_rate, hit, state, master_bytes, in_memory,
                  read_per_byte, per_tensor, shared_cores, shared_disk_rate):
    """predict() for the rpc_known_hashes master: one lane per worker, all at once; the master's own read beside them."""
    hash_rate, hit_rate, store_rate = figure("hash_rate"), figure("worker_hit_rate"), figure("worker_store_rate")
    unhashed = model_bytes - hashed_bytes
    lanes, disk_bytes, cpu_work = [], 0.0, 0.0
    for worker, fraction in zip(workers, share):
        hashed, small = hashed_bytes * fraction, unhashed * fraction
        cached = worker.get("cache_in_memory")
        if hit:
            # the worker reads its cache file (from its disk unless its page cache holds it) and copies it in
            work = hashed / hit_rate
            lane = work + (0.0 if cached else hashed / worker["disk_read"]) + small * read_per_byte
            disk_bytes += 0.0 if cached else hashed
            sent = small
        else:
            # the lane reads the bytes from the model (their hash is the record's), copies them into a message and
            # sends them; the worker hashes them, stores them and copies them in (write-back hides its disk, as stock's)
            work = hashed * (1 / hit_rate + 1 / hash_rate + 1 / store_rate)
            lane = hashed * read_per_byte + work + small * read_per_byte
            sent = hashed + small
        lane += sent / network_rate + small / hit_rate
        cpu_work += work + small / hit_rate
        lanes.append(lane)
    disk_bytes += (unhashed + master_bytes + (0 if hit else hashed_bytes)) * (1 - in_memory)
    master_own = master_bytes * read_per_byte
    fill = max(lanes) if lanes else 0.0
    seconds = max(fill, master_own)
    cache_reads = "copies in memory" if all(w.get("cache_in_memory") for w in workers) else "their disks"
    bound = ("the workers' cache reads (%s), all at once" % cache_reads if hit else
             "the workers' stores (hashing again and writing what they receive), all at once")
    if master_own > fill:
        bound = "the master's read of what it keeps itself"
    if shared_cores and cpu_work / shared_cores > seconds:
        seconds, bound = cpu_work / shared_cores, "the cores the master and the workers share (%d)" % shared_cores
    if shared_disk_rate and disk_bytes / shared_disk_rate > seconds:
        seconds, bound = disk_bytes / shared_disk_rate, "the one disk the master and the workers read"
    total = seconds + per_tensor
    parts = {"master_read": master_own + unhashed * read_per_byte, "master_hash": 0.0,
             "transfer": (unhashed if hit else model_bytes) / network_rate, "workers": fill, "per_tensor": per_tensor}
    return {"seconds": round(total, 1), "bound": bound, "parts": {key: round(value, 1) for key, value in parts.items()},
            "bytes_sent": int(unhashed if hit else model_bytes)}


def known_hashes(figures):
    """Whether load figures (gguf_plan's load_figures) say the master's build is rpc_known_hashes'."""
    return str((figures or {}).get("known_hashes")).lower() in ("true", "1")


def for_plan(header, plan, tensors_by_worker, figures, state):
    """predict() for a gguf_plan plan: the bytes and tensors each worker receives, from the model's header.

    tensors_by_worker: {endpoint: [hashed tensor...]} (tensor_cache.assign); figures: {"master_disk_read",
    "master_cached_bytes", "network_rate", "worker_disk_read", "worker_disk_write"} in bytes (per second), and what the
    master's build changes: "hash_threads" (rpc_hash_ahead), "known_hashes" (rpc_known_hashes).
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
    return predict(model_bytes, hashed, sent_tensors, workers, master, figures["network_rate"], state,
                   master_bytes=plan["master"]["weights_bytes"], hash_threads=int(figures.get("hash_threads") or 1),
                   known_hashes=known_hashes(figures))
