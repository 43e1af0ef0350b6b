# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plan how a model splits across RPC workers (and, when it must, the master), before loading it.

The plan chooses llama-server's slots (-np), -ngl and -ts: the most slots asked for that fit, each with the whole
context, then the most layers on the workers. Each node may take `fraction` of its RAM and no more than is free.

What a choice needs on each node is llama.cpp's own projection when a projector is given (llama_fit: llama-fit-params
run on the master against its workers): weights, caches and compute buffers exactly as llama-server will allocate
them, for every architecture llama.cpp loads. Without one (a master with no build yet, the controller), the figures
are model_arch's: the weights and caches as llama.cpp computes them for the families it models, and an estimate of the
compute buffers; an architecture it does not model is refused rather than planned as if it were LLaMA.

Placement is llama.cpp's (llama-model.cpp, load_tensors): the input layer (token_embd) stays on the master; with -ngl N
the layers from n_layer + 1 - N on, counting the output layer as layer n_layer, go to the devices, layer il to the
first device whose cumulative tensor-split share exceeds (il - first offloaded) / offloaded. The collection needs that
per tensor (each worker's cache is staged with its share), so the weights per worker are always model_arch's, and
with a projector they are checked against llama.cpp's; the master's are llama.cpp's when it projects them.
"""

from __future__ import annotations

import bisect
import math

from ansible_collections.graviton.llama_rpc.plugins.module_utils.aws import instance_types
from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import model_arch

MIB = 1 << 20
GIB = 1 << 30
ACTIVATION_BYTES = 4  # f32 activations
ALL_LAYERS = 999  # -ngl 999: everything that can go to the devices goes (the manual flow's value)
# How far the collection's weights per node may be from llama.cpp's before the plan is refused: tensors are padded to
# their buffer's alignment, and llama.cpp's figures are whole MiB.
WEIGHTS_TOLERANCE = (0.02, 4 * MIB)


class PlanError(ValueError):
    """The model does not fit, or cannot be planned; the message carries the numbers and the fix."""


def human(size):
    return "%.2f GiB" % (size / GIB) if size >= GIB else "%.1f MiB" % (size / MIB)


def compute_estimate(shape, ubatch, with_output):
    """An estimate of one node's compute buffer, used only without llama.cpp's projection: the feed-forward
    activations of one micro-batch and, on the node with the output layer, its logits (flash attention, which llama.cpp
    turns on for CPU and RPC devices, keeps no attention score matrix)."""
    feed_forward = 3 * ubatch * max(shape["feed_forward_length"], 4 * shape["embedding_length"])
    logits = ubatch * shape["vocab_size"] if with_output else 0
    return ACTIVATION_BYTES * (feed_forward + logits)


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


def tensor_split(workers):
    """-ts: proportional to each worker's usable memory, in MiB (llama.cpp normalises the list itself)."""
    return [max(1, worker["usable"] // MIB) for worker in workers]


def place(shape, gpu_layers, split):
    """Node index per layer (block_count of them) and for the output layer: -1 for the master, else the device."""
    layers = shape["layers"]
    first_gpu = max(layers + 1 - gpu_layers, 0)
    active = min(gpu_layers, layers + 1) if split else 0
    points = split_points(split) if split else []

    def node(layer):
        if layer < first_gpu or layer - first_gpu >= active:
            return -1
        return min(bisect.bisect_right(points, float(layer - first_gpu) / active), len(points) - 1)

    return [node(layer) for layer in range(layers)], node(layers)


# What the master holds beside the model unless the caller names more (a draft model): a refusal names it
PROMPT_CACHE = "llama-server's prompt cache"


class Planner:
    """Evaluates choices (slots, -ngl) for one model and cluster; with a projector, through llama.cpp."""

    def __init__(self, shape, context, ubatch, workers, master, fraction, projector=None, master_reserved=0,
                 reserved_what=PROMPT_CACHE, parallel_sends=False):
        """context: tokens per slot; workers: [{"endpoint", "free", "total"}] (bytes, from rpc_probe); master: {"free",
        "total"}; projector(endpoints, gpu_layers, tensor_split, context, slots) -> llama_fit.parse()'s dict;
        master_reserved: bytes the master holds beside the model (llama-server's prompt cache, a draft model), which
        reserved_what names in a refusal; parallel_sends: the master's build sends every worker its weights at once
        (rpc_known_hashes' lanes), so it holds a message, a copy of a weight, for each of them while it loads."""
        if not shape["modelled"] and projector is None:
            raise PlanError(
                "the collection does not model the caches of architecture %r (it models %s), and planning it as a LLaMA "
                "would be wrong: the plan needs llama.cpp's own projection, which runs on the master with llama_build's "
                "build (llama-fit-params in llama_build_targets) and its workers up. Deploy with playbooks/deploy.yml, "
                "or use a model of a modelled architecture." % (shape["architecture"], ", ".join(sorted(model_arch.FAMILIES))))
        self.shape, self.context, self.ubatch = shape, context, ubatch
        self.fraction, self.projector, self.master_reserved = fraction, projector, master_reserved
        self.reserved_what, self.parallel_sends = reserved_what, parallel_sends
        self.workers = [dict(worker, usable=usable_bytes(worker["free"], worker["total"], fraction)) for worker in workers]
        self.master = dict(master, usable=usable_bytes(master["free"], master["total"], fraction))
        self.projections = 0
        self._seen = {}

    def evaluate(self, slots, gpu_layers, workers=None):
        """Per-node needs for one choice: (worker nodes, master node)."""
        workers = self.workers if workers is None else workers
        key = (slots, gpu_layers, tuple(worker["endpoint"] for worker in workers))
        if key not in self._seen:
            self._seen[key] = self._evaluate(slots, gpu_layers, workers)
        return self._seen[key]

    def _evaluate(self, slots, gpu_layers, workers):
        shape = self.shape
        context = self.context * slots
        split = tensor_split(workers) if workers else []
        layer_nodes, output_node = place(shape, gpu_layers, split)
        nodes = [dict(name=worker["endpoint"], usable=worker["usable"], layers=[], weights=0, kv=0) for worker in workers]
        master = dict(name="master", usable=self.master["usable"], layers=[], weights=shape["input_bytes"], kv=0)
        for layer, index in enumerate(layer_nodes):
            node = master if index < 0 else nodes[index]
            node["layers"].append(layer)
            node["weights"] += shape["layer_bytes"][layer]
            if shape["modelled"]:
                node["kv"] += model_arch.layer_cache_bytes(shape, layer, context, slots, self.ubatch)
        output = master if output_node < 0 else nodes[output_node]
        # a tied output's copy of token_embd: on a worker always; on the master's CPU only when the output's matrix
        # multiplication takes another buffer type (weights repacked for the CPU), which llama.cpp's projection says:
        # counted here, as an estimate that is never below
        output["weights"] += shape["output_bytes"] + shape["tied_copy_bytes"]
        for node in nodes + [master]:
            node["output"] = node is output
            node["kv_estimate"] = node["kv"]
            busy = bool(node["layers"]) or node["output"] or node is master
            node["compute"] = compute_estimate(shape, self.ubatch, node["output"]) if busy else 0
            node["source"] = "estimate"
        if self.projector is not None:
            projected = self.projector([worker["endpoint"] for worker in workers], gpu_layers, split, context, slots)
            self.projections += 1
            for node in nodes + [master]:
                figures = projected["master"] if node is master else projected["workers"][node["name"]]
                node["projected_weights"] = figures["model"]
                node["weights_estimate"] = node["weights"]
                if node is master:
                    # what the master's CPU takes is llama.cpp's to say (it repacks some types, in a copy for a tied
                    # output); the plain table leaves the repacked weights out, so the estimate stays then
                    if projected.get("complete", True):
                        node["weights"] = figures["model"]
                else:  # each worker's share is staged: it must be the tensors llama.cpp puts there
                    self._check_weights(node, figures["model"], gpu_layers)
                node["kv"], node["compute"], node["source"] = figures["context"], figures["compute"], "llama.cpp"
        master["reserved"] = self.master_reserved
        master["sending"] = self._sending(nodes, layer_nodes, output_node)
        for node in nodes + [master]:
            node["need"] = node["weights"] + node["kv"] + node["compute"] + node.get("reserved", 0)
        # while it loads, the master holds the message of the weight it is sending (a copy of its bytes) and none of its
        # caches, compute buffers, prompt cache or draft yet: its need is the larger of the two moments
        master["need"] = max(master["need"], master["weights"] + master["sending"])
        for node in nodes + [master]:
            node["fits"] = node["need"] <= node["usable"]
        return nodes, master

    def _sending_said(self, master):
        """The load's moment in a refusal, when it is the master's larger need."""
        if master["need"] != master["weights"] + master["sending"] or not master["sending"]:
            return ""
        return "; while it loads, the master's messages to %s hold %s" % (
            "every worker at once" if self.parallel_sends else "a worker", human(master["sending"]))

    def _sending(self, nodes, layer_nodes, output_node):
        """Bytes of the messages the master holds at once while it loads: a worker's largest weight, one worker at a
        time (stock's set_tensor) or every worker's at once (parallel_sends)."""
        largest = [0] * len(nodes)
        for layer, index in enumerate(layer_nodes):
            if index >= 0:
                largest[index] = max(largest[index], self.shape["layer_largest_bytes"][layer])
        if output_node >= 0:
            largest[output_node] = max(largest[output_node], self.shape["output_largest_bytes"])
        return sum(largest) if self.parallel_sends else max(largest, default=0)

    def _check_weights(self, node, projected, gpu_layers):
        """The staging sends each worker the tensors model_arch places there: refuse a model where llama.cpp places
        others (its figure is whole MiB, rounded up)."""
        relative, absolute = WEIGHTS_TOLERANCE
        if abs(node["weights"] - projected) > max(relative * projected, absolute):
            raise PlanError(
                "llama.cpp places %s of %s's weights on %s at -ngl %d, the collection %s: it would stage the wrong "
                "tensors in the workers' caches. Set rpc_master_stage_caches: false for this model (llama.cpp then "
                "sends the weights itself), and report the model's architecture to the collection."
                % (human(projected), self.shape["architecture"], node["name"], gpu_layers, human(node["weights"])))

    def fits(self, slots, gpu_layers, workers=None):
        nodes, master = self.evaluate(slots, gpu_layers, workers)
        return all(node["fits"] for node in nodes) and master["fits"]

    def most_layers(self, slots):
        """The most -ngl at which every worker fits (fewer layers only move weight to the master), or None when the
        master cannot hold the rest even then."""
        everything = self.shape["layers"] + 1
        if self.fits(slots, everything):
            return everything

        def workers_fit(gpu_layers):
            nodes, _master = self.evaluate(slots, gpu_layers)
            return all(node["fits"] for node in nodes)

        low, high = 0, everything  # workers_fit(0) holds (they hold nothing); workers_fit(everything) may not
        if workers_fit(everything):
            return None  # the workers hold everything, and the master still does not fit
        while high - low > 1:
            middle = (low + high) // 2
            if workers_fit(middle):
                low = middle
            else:
                high = middle
        return low if self.fits(slots, low) else None

    def plan(self, slots):
        if not self.workers or sum(worker["usable"] for worker in self.workers) == 0:
            raise PlanError("no worker reports any usable memory")
        for slot_count in range(slots, 0, -1):
            gpu_layers = self.most_layers(slot_count)
            if gpu_layers is not None:
                planned = self.result(slot_count, slots, gpu_layers)
                planned["advice"] = self.right_size(slot_count)
                planned["projections"] = self.projections
                return planned
        nodes, master = self.evaluate(1, self.shape["layers"] + 1)
        need = sum(node["need"] for node in nodes) + master["need"]
        usable = sum(worker["usable"] for worker in self.workers) + self.master["usable"]
        raise PlanError(
            "the model does not fit, even with one slot: it needs about %s (weights %s, caches %s for a context of %d "
            "tokens, compute buffers %s%s%s) and the cluster can give %s (%s; each node at most %d%% of its RAM and no "
            "more than is free). Add workers or larger instances, lower the context size, or use a smaller (more "
            "quantised) model." % (
                human(need), human(self.shape["loaded_bytes"]), human(sum(node["kv"] for node in nodes) + master["kv"]),
                self.context, human(sum(node["compute"] for node in nodes) + master["compute"]),
                (", %s %s" % (self.reserved_what, human(self.master_reserved))) if self.master_reserved else "",
                self._sending_said(master),
                human(usable), ", ".join(["%s %s" % (worker["endpoint"], human(worker["usable"])) for worker in self.workers]
                                         + ["master %s" % human(self.master["usable"])]),
                round(self.fraction * 100)))

    def right_size(self, slots):
        """Whether fewer nodes would hold the same plan (every slot's cache included). RPC pools memory, it does not
        add compute: each token crosses every worker in turn, so a model split over more nodes than it needs runs
        slower.

        master_alone: everything, with the master's own compute buffer, within the master's usable memory.
        fewest_workers: the fewest of the workers, first ones first, that hold every layer (None: all are needed).
        single_node_bytes: what one node would need; single_instance: the smallest C8g whose memory holds that at
        `fraction` (graviton_types), or None.
        """
        _nodes, alone = self.evaluate(slots, 0, workers=[])
        fewest = None
        for count in range(1, len(self.workers)):
            if self.fits(slots, self.shape["layers"] + 1, self.workers[:count]):
                fewest = count
                break
        single = instance_types.smallest_holding(alone["need"], self.fraction)
        return {
            "master_alone": alone["fits"],
            "fewest_workers": fewest,
            "workers": len(self.workers),
            "single_node_bytes": alone["need"],
            "master_usable_bytes": alone["usable"],
            "single_instance": single["name"] if single else None,
            "single_instance_memory_gib": single["memory_gib"] if single else None,
        }

    def result(self, slots, slots_asked, gpu_layers):
        nodes, master = self.evaluate(slots, gpu_layers)
        everything_offloaded = gpu_layers > self.shape["layers"]

        def describe(node):
            described = {
                "name": node["name"],
                "layers": [node["layers"][0], node["layers"][-1]] if node["layers"] else [],
                "layer_count": len(node["layers"]),
                "output": node["output"],
                "weights_bytes": node["weights"],
                "kv_bytes": node["kv"],
                "kv_estimate_bytes": node["kv_estimate"],
                "compute_bytes": node["compute"],
                "need_bytes": node["need"],
                "usable_bytes": node["usable"],
                "use_ratio": round(float(node["need"]) / node["usable"], 3) if node["usable"] else None,
                "figures": node["source"],
            }
            if "projected_weights" in node:
                described["projected_weights_bytes"] = node["projected_weights"]
                described["weights_estimate_bytes"] = node["weights_estimate"]
            if node.get("reserved"):
                described["reserved_bytes"] = node["reserved"]
            if node.get("sending"):
                described["sending_bytes"] = node["sending"]
            return described

        return {
            "n_gpu_layers": ALL_LAYERS if everything_offloaded else gpu_layers,
            "master_carries_layers": bool(master["layers"]),
            "tensor_split": tensor_split(self.workers),
            "context": self.context,
            # llama-server's slots (-np) and its whole context (-c: every slot's, split between them)
            "slots": slots,
            "slots_asked": slots_asked,
            "server_context": self.context * slots,
            "workers": [describe(node) for node in nodes],
            "master": describe(master),
            "need_bytes": sum(node["need"] for node in nodes) + master["need"],
            "figures": master["source"],
        }


def plan(shape, context, ubatch, workers, master, fraction, slots=1, projector=None, master_reserved=0,
         reserved_what=PROMPT_CACHE, parallel_sends=False):
    """The plan for the most slots, then the most layers on the workers, that fits; or PlanError with the numbers."""
    return Planner(shape, context, ubatch, workers, master, fraction, projector, master_reserved, reserved_what,
                   parallel_sends).plan(slots)


def tensor_plan(shape, bounds, context, workers, master, fraction, slots=1, projector=None, master_reserved=0,
                reserved_what=PROMPT_CACHE, master_share=None):
    """The plan in tensor mode (--split-mode tensor): every layer on the workers, each worker a share of each layer; the
    master's CPU holds the input layer only (llama.cpp skips it for tensor parallelism). The most slots asked for that
    fit. bounds: tensor_split.worker_bounds' dict (the busiest worker's weights); projector(endpoints, gpu_layers,
    split, context, slots) -> llama_fit.parse_tensor's dict: llama.cpp's projection, whose "meta" row is the whole of
    the workers' caches (split in KV heads: bounds' kv_fraction on the busiest) and one worker's compute buffer.
    master_share: the endpoint among workers that is the master's own RPC server on loopback (rpc_master_tensor_on_master):
    it and llama-server draw from one RAM, so it may take what the master's usable memory leaves after llama-server's
    need, whatever it reports as free."""
    if projector is None:
        raise PlanError("tensor mode is planned with llama.cpp's projection, which runs on the master with llama_build's "
                        "build (llama-fit-params in llama_build_targets) and its workers up")
    if not workers:
        raise PlanError("tensor mode needs workers")
    nodes = [dict(worker, usable=usable_bytes(worker["free"], worker["total"], fraction)) for worker in workers]
    master_usable = usable_bytes(master["free"], master["total"], fraction)
    tried = []
    for slot_count in range(slots, 0, -1):
        projected = projector([worker["endpoint"] for worker in workers], ALL_LAYERS, [], context * slot_count, slot_count)
        meta, host = projected["meta"], projected["master"]
        kv = int(math.ceil(meta["context"] * bounds["kv_fraction"]))
        master_need = host["model"] + host["context"] + host["compute"] + master_reserved
        described = []
        for node in nodes:
            need = bounds["weights"] + kv + meta["compute"]
            on_master = node["endpoint"] == master_share
            usable = max(master_usable - master_need, 0) if on_master else node["usable"]
            described.append(dict({
                "name": node["endpoint"], "layers": [0, shape["layers"] - 1], "layer_count": shape["layers"],
                "output": True, "weights_bytes": bounds["weights"], "kv_bytes": kv, "compute_bytes": meta["compute"],
                "need_bytes": need, "usable_bytes": usable,
                "use_ratio": round(float(need) / usable, 3) if usable else None, "figures": "llama.cpp"},
                **({"on_master": True} if on_master else {})))
        master_node = {"name": "master", "layers": [], "layer_count": 0, "output": False, "weights_bytes": host["model"],
                       "kv_bytes": host["context"], "compute_bytes": host["compute"], "need_bytes": master_need,
                       "usable_bytes": master_usable, "figures": "llama.cpp",
                       "use_ratio": round(float(master_need) / master_usable, 3) if master_usable else None}
        if master_reserved:
            master_node["reserved_bytes"] = master_reserved
        tried.append((slot_count, described, master_node))
        if all(node["need_bytes"] <= node["usable_bytes"] for node in described) and master_need <= master_usable:
            return {
                "split_mode": "tensor", "n_gpu_layers": ALL_LAYERS, "master_carries_layers": False, "tensor_split": [],
                "context": context, "slots": slot_count, "slots_asked": slots, "server_context": context * slot_count,
                "workers": described, "master": master_node,
                "need_bytes": sum(node["need_bytes"] for node in described) + master_need, "figures": "llama.cpp",
                "advice": {"master_alone": False, "fewest_workers": None, "workers": len(workers)},
            }
    _slots, described, master_node = tried[-1]
    short = [node for node in described if node["need_bytes"] > node["usable_bytes"]]
    share_words = " (the master's share, beside llama-server)"
    raise PlanError(
        "the model does not fit in tensor mode, even with one slot: each worker holds a share of every layer, %s of "
        "weights (the busiest), %s of caches for a context of %d tokens and a compute buffer of %s, %s in all, and %s "
        "(each node at most %d%% of its RAM and no more than is free); the master needs %s%s of %s. Add workers or "
        "memory, lower rpc_master_context_size, or set rpc_master_split_mode: layer (the master's RAM may then carry "
        "layers too)."
        % (human(described[0]["weights_bytes"]), human(described[0]["kv_bytes"]), context,
           human(described[0]["compute_bytes"]), human(described[0]["need_bytes"]),
           ", ".join("%s%s can give %s" % (node["name"], share_words if node.get("on_master") else "", human(node["usable_bytes"]))
                     for node in short) or "every worker fits",
           round(fraction * 100), human(master_node["need_bytes"]),
           " (with %s)" % reserved_what if master_reserved else "", human(master_usable)))
