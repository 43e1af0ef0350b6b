# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plan how a model splits across RPC workers (and, when it must, the master), before loading it.

It mirrors llama.cpp's own placement (llama-model.cpp, load_tensors): the input layer (token
embeddings) stays on the master's CPU; with -ngl N the last N repeating layers, and the output head
when N exceeds the layer count, go to the devices in order, layer il to the first device whose
cumulative tensor-split share exceeds (il - first offloaded layer) / offloaded layers. Each layer's KV
cache lives with the layer. llama-server's slots (-np N, its KV cache not unified) split its -c between them, so N
slots of C tokens each need the KV cache of N x C tokens: the plan gives every slot the context asked for and
keeps as many of the slots asked for as fit. Compute buffers are an estimate (the largest activations of one micro-batch),
which is why every device keeps headroom: RPC workers have been seen to crash above about 75% of RAM.
"""

from __future__ import annotations

import bisect

from ansible_collections.graviton.llama_rpc.plugins.module_utils import graviton_types

MIB = 1 << 20
GIB = 1 << 30
KV_BYTES_PER_VALUE = 2  # the KV cache is f16 by default
ACTIVATION_BYTES = 4  # f32 activations
ALL_LAYERS = 999  # -ngl 999: everything that can go to the devices goes (the manual flow's value)


class PlanError(ValueError):
    """The model does not fit; the message carries the numbers."""


def human(size):
    return "%.2f GiB" % (size / GIB) if size >= GIB else "%.1f MiB" % (size / MIB)


def compute_bytes(shape, context, ubatch, with_output):
    """Estimated compute buffer of one device: attention scores, the feed-forward activations and,
    on the device holding the output head, the logits of one micro-batch."""
    attention = ubatch * context * shape["heads"]
    feed_forward = 3 * ubatch * max(shape["feed_forward_length"], 4 * shape["embedding_length"])
    logits = ubatch * shape["vocab_size"] if with_output else 0
    return ACTIVATION_BYTES * (attention + feed_forward + logits)


def kv_bytes_per_layer(shape, context):
    return context * shape["kv_width"] * KV_BYTES_PER_VALUE


def usable_bytes(free, total, fraction):
    """What a node may take: its free memory, but never more than `fraction` of its RAM."""
    return max(0, min(int(free), int(total * fraction)))


def split_points(weights):
    total = float(sum(weights))
    points, running = [], 0.0
    for weight in weights:
        running += weight
        points.append(running / total)
    return points


def place(shape, gpu_layers, weights):
    """Node index per repeating layer and for the output head: -1 for the master, else the device."""
    layers = shape["layers"]
    first_gpu = max(layers - gpu_layers, 0)
    active = min(gpu_layers, layers + 1)
    points = split_points(weights)

    def node(layer):
        if layer < first_gpu or layer - first_gpu >= active:
            return -1
        return min(bisect.bisect_right(points, float(layer - first_gpu) / active), len(points) - 1)

    return [node(layer) for layer in range(layers)], node(layers)


def evaluate(shape, context, ubatch, gpu_layers, workers, master):
    """Per-node needs for one -ngl value; workers and master carry "usable" bytes. context: the KV cache's tokens
    (every slot's)."""
    layer_nodes, output_node = place(shape, gpu_layers, [worker["usable"] for worker in workers])
    kv_layer = kv_bytes_per_layer(shape, context)
    nodes = [dict(name=worker["endpoint"], usable=worker["usable"], layers=[], weights=0, kv=0) for worker in workers]
    master_node = dict(name="master", usable=master["usable"], layers=[], weights=shape["input_bytes"], kv=0)
    for layer, index in enumerate(layer_nodes):
        node = master_node if index < 0 else nodes[index]
        node["layers"].append(layer)
        node["weights"] += shape["layer_bytes"][layer]
        node["kv"] += kv_layer
    output = master_node if output_node < 0 else nodes[output_node]
    output["weights"] += shape["output_bytes"]
    for node in nodes + [master_node]:
        holds_output = node is output
        busy = bool(node["layers"]) or holds_output or node is master_node
        node["compute"] = compute_bytes(shape, context, ubatch, holds_output) if busy else 0
        node["need"] = node["weights"] + node["kv"] + node["compute"]
        node["fits"] = node["need"] <= node["usable"]
        node["output"] = holds_output
    return nodes, master_node


def plan(shape, context, ubatch, workers, master, fraction, slots=1):
    """Return the plan for the most slots, then the most layers on the workers, that fits, or raise PlanError with
    the numbers. context: tokens per slot; slots: the most slots wanted (each with the whole context).

    workers: [{"endpoint", "free", "total"}] (bytes, from rpc_probe); master: {"free", "total"}.
    """
    workers = [dict(worker, usable=usable_bytes(worker["free"], worker["total"], fraction)) for worker in workers]
    master = dict(master, usable=usable_bytes(master["free"], master["total"], fraction))
    if not workers or sum(worker["usable"] for worker in workers) == 0:
        raise PlanError("no worker reports any usable memory")
    for slot_count in range(slots, 0, -1):
        for gpu_layers in range(shape["layers"] + 1, -1, -1):
            nodes, master_node = evaluate(shape, context * slot_count, ubatch, gpu_layers, workers, master)
            if all(node["fits"] for node in nodes) and master_node["fits"]:
                planned = result(shape, context, slot_count, slots, gpu_layers, workers, nodes, master_node)
                planned["advice"] = right_size(shape, context * slot_count, ubatch, workers, master, fraction)
                return planned
    nodes, master_node = evaluate(shape, context, ubatch, shape["layers"] + 1, workers, master)
    need = sum(node["need"] for node in nodes) + master_node["need"]
    usable = sum(worker["usable"] for worker in workers) + master["usable"]
    raise PlanError(
        "the model does not fit, even with one slot: it needs about %s (weights %s, KV cache %s for a context of %d "
        "tokens, compute buffers %s) and the cluster can give %s (%s; each node at most %d%% of its RAM and no more "
        "than is free). Add workers or larger instances, lower the context size, or use a smaller (more quantised) model."
        % (human(need), human(shape["weights_bytes"]), human(kv_bytes_per_layer(shape, context) * shape["layers"]),
           context, human(sum(node["compute"] for node in nodes) + master_node["compute"]), human(usable),
           ", ".join(["%s %s" % (worker["endpoint"], human(worker["usable"])) for worker in workers]
                     + ["master %s" % human(master["usable"])]),
           round(fraction * 100)))


def right_size(shape, context, ubatch, workers, master, fraction):
    """Whether fewer nodes would hold the same plan (every slot's KV cache included). RPC pools memory, it does not
    add compute: each token crosses every worker in turn, so a model split over more nodes than it needs runs slower.

    master_alone: everything, with the master's own compute buffer, within the master's usable memory.
    fewest_workers: the fewest of the workers, first ones first, that hold every layer (None: all of them are needed).
    single_node_bytes: what one node would need; single_instance: the smallest C8g whose memory holds that at
    `fraction` (graviton_types), or None.
    """
    _nodes, alone_master = evaluate(shape, context, ubatch, 0, workers, master)
    fewest = None
    for count in range(1, len(workers)):
        nodes, master_node = evaluate(shape, context, ubatch, shape["layers"] + 1, workers[:count], master)
        if all(node["fits"] for node in nodes) and master_node["fits"]:
            fewest = count
            break
    single = graviton_types.smallest_holding(alone_master["need"], fraction)
    return {
        "master_alone": alone_master["fits"],
        "fewest_workers": fewest,
        "workers": len(workers),
        "single_node_bytes": alone_master["need"],
        "master_usable_bytes": alone_master["usable"],
        "single_instance": single["name"] if single else None,
        "single_instance_memory_gib": single["memory_gib"] if single else None,
    }


def result(shape, context, slots, slots_asked, gpu_layers, workers, nodes, master_node):
    everything_offloaded = gpu_layers > shape["layers"]

    def describe(node):
        return {
            "name": node["name"],
            "layers": [node["layers"][0], node["layers"][-1]] if node["layers"] else [],
            "layer_count": len(node["layers"]),
            "output": node["output"],
            "weights_bytes": node["weights"],
            "kv_bytes": node["kv"],
            "compute_bytes": node["compute"],
            "need_bytes": node["need"],
            "usable_bytes": node["usable"],
            "use_ratio": round(float(node["need"]) / node["usable"], 3) if node["usable"] else None,
        }

    return {
        "n_gpu_layers": ALL_LAYERS if everything_offloaded else gpu_layers,
        "master_carries_layers": not everything_offloaded,
        # Proportional to each worker's usable memory, in MiB: llama.cpp normalises the list itself.
        "tensor_split": [max(1, worker["usable"] // MIB) for worker in workers],
        "context": context,
        # llama-server's slots (-np) and its whole context (-c: every slot's, split between them).
        "slots": slots,
        "slots_asked": slots_asked,
        "server_context": context * slots,
        "workers": [describe(node) for node in nodes],
        "master": describe(master_node),
        "need_bytes": sum(node["need"] for node in nodes) + master_node["need"],
    }
