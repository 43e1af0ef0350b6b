#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gguf_plan
short_description: Read a GGUF model's headers and plan its split across llama.cpp RPC workers
version_added: 0.1.0
description:
  - Reads the headers of a GGUF model on the master, one file or every part of a multi-part set (architecture, layers,
    tensor types and sizes, context length), never its weights, and refuses what llama.cpp would refuse (a part
    missing or of another set, a path to a part other than the first, a tensor type the pinned llama.cpp lacks, a file
    cut short), naming the fix.
  - Plans where the model goes the way llama.cpp places it with C(-ngl), C(--tensor-split) and C(--rpc); the most
    llama-server slots asked for (O(slots)) that fit, then the most layers on the workers, against each worker's free
    memory (from M(graviton.llama_rpc.rpc_probe)) and the master's, each capped at O(memory_fraction) of its RAM.
  - With O(projection), what each choice needs on each node (weights, caches, compute buffers) is llama.cpp's own
    projection (C(llama-fit-params --fit-print on), run here against the workers), for any architecture llama.cpp
    loads. Without it, the collection's model of llama.cpp's caches (architectures llama, qwen3moe, gpt-oss, gemma3,
    deepseek2 and qwen3next) and an estimate of the compute buffers; other architectures are refused.
  - When the workers cannot hold everything, the master's RAM carries the first layers (a lower
    C(-ngl)). When the cluster cannot hold the model at all, it fails with the numbers.
author:
  - graviton.llama_rpc developers (@graviton)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - graviton.llama_rpc.attributes
options:
  path:
    description: The GGUF model file on the master; for a multi-part set its first part (the others beside it).
    type: path
    required: true
  workers:
    description:
      - The workers with their memory, as M(graviton.llama_rpc.rpc_probe) returns them (its C(workers)).
      - Each needs C(endpoint) and C(devices) (a list of C(free) and C(total) bytes).
      - An empty list only reads and checks the header (no plan), for example before the workers exist.
    type: list
    elements: dict
    required: true
  context_size:
    description: The context (tokens) of each slot, to reserve KV cache for. V(0) means the model's training context.
    type: int
    default: 0
  slots:
    description:
      - The most llama-server slots (C(-np)) wanted, each with the whole O(context_size). The plan keeps as many as fit
        (RV(plan.slots)), before it moves layers to the master; llama-server then runs with C(-c) RV(plan.server_context).
    type: int
    default: 1
  ubatch_size:
    description: The micro-batch (llama.cpp C(-ub)) the compute buffers are sized for.
    type: int
    default: 512
  memory_fraction:
    description: The most of a node's RAM the plan may use (workers have been seen to crash above 75%).
    type: float
    default: 0.75
  master_memory:
    description:
      - The master's C(free) and C(total) bytes. Default, this host's C(MemAvailable) and C(MemTotal).
    type: dict
  server_pid:
    description:
      - The running llama-server this plan would replace, planned before it is stopped. Its private memory (C(RssAnon))
        counts as the master's free memory, since it returns once the server stops. V(0) counts none.
    type: int
    default: 0
  master_reserved_bytes:
    description: Bytes the master holds beside the model, counted in its need (llama-server's prompt cache, C(--cache-ram)).
    type: int
    default: 0
  projection:
    description:
      - Ask llama.cpp, with C(program) (the build's C(llama-fit-params)), C(flash_attn) (C(auto), C(on) or C(off), as
        llama-server runs; default C(auto)) and C(timeout) (seconds per projection, default 300). The workers must be
        free (a worker serves one client at a time).
      - With C(stand_ins) (the path of the master's C(ggml-rpc-server)), the projection asks stand-ins of the workers
        instead, started on the master's loopback for its duration (transient systemd units), for the plan of a model
        whose workers a running llama-server holds. Their memory is O(workers)' figures, as always.
    type: dict
  split_mode:
    description:
      - How llama.cpp splits the model across the workers (C(--split-mode)). V(layer), its default, puts whole layers on
        each node, which a token visits in turn. V(tensor) puts a share of every layer on every worker, which they
        compute at once (the master's CPU holds the input layer only). It is refused for an architecture llama.cpp does
        not split so, for one worker, and for more workers than the model has KV heads; it needs O(projection), and
        each worker's need is its share of llama.cpp's projection (a bound never below what llama.cpp allocates there;
        attention is shared in whole KV heads, the FFN in blocks of 128 columns). No first load is predicted for it.
    type: str
    choices: [layer, tensor]
    default: layer
  master_share:
    description:
      - In V(tensor) mode, the endpoint among O(workers) that is the master's own C(ggml-rpc-server) on loopback (the
        master's CPU holding a share of every layer). It and llama-server draw from the master's RAM, so it may take what
        the master's usable memory leaves after llama-server's need, whatever it reports as free. Empty means none.
    type: str
    default: ""
  draft:
    description:
      - Speculative decoding, given by C(kind) (default V(draft-simple)) and C(path), the draft model llama-server
        keeps on the master's own CPU beside the model (its file, or a set's first part), for the kinds that load one. Each
        kind's rule is llama.cpp's, else the plan is refused naming the difference; for V(draft-simple) the vocabulary
        must be one llama-server accepts beside the model's (the same tokenizer, BOS and EOS, the same tokens within
        llama.cpp's bounds); V(draft-eagle3) takes an eagle3 draft with three extract layers, V(draft-dflash) and
        V(draft-dspark) a dflash draft; V(draft-mtp) needs the model's own multi-token-prediction layers. The draft's
        weights, caches and compute buffers for O(context_size) and O(slots) are llama.cpp's projection of it alone
        (O(projection) required), counted in the master's need with O(master_reserved_bytes).
    type: dict
  plan:
    description:
      - A plan made before (the one llama-server runs with, RV(plan)). Nothing is planned or projected; the model's headers
        are read and RV(load) is predicted for that plan with O(load_figures).
    type: dict
  load_figures:
    description:
      - The rates the first load depends on, to predict its time (RV(load)) with the collection's load-time model
        (docs/performance.md). C(master_disk_read), C(worker_disk_read), C(worker_disk_write) and C(network_rate) (one
        TCP flow) in bytes per second, C(master_cached_bytes) the part of the model in the master's page cache;
        C(hash_threads) and C(known_hashes) what the master's build changes in the load (llama_build_patches
        C(rpc_hash_ahead), C(rpc_known_hashes)).
      - With C(known_hashes) true the plan also counts, in the master's need while it loads, one message (a copy of a
        weight) per worker at once, as that build's load sends them; else one at a time.
      - Omitted, no prediction is made.
    type: dict
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Check the workers and get their memory
  graviton.llama_rpc.rpc_probe:
    workers: "{{ workers }}"
    fail_unless_all_ok: true
  register: probe

- name: Plan the split (fails, with the numbers, when the model does not fit)
  graviton.llama_rpc.gguf_plan:
    path: /var/lib/llama-models/model.gguf
    workers: "{{ probe.workers }}"
    context_size: 4096
  register: plan

- name: Run with the plan
  ansible.builtin.command: >-
    llama-completion -m /var/lib/llama-models/model.gguf --rpc {{ workers | join(',') }}
    -ngl {{ plan.plan.n_gpu_layers }} -ts {{ plan.plan.tensor_split | join(',') }} -c 4096 -p Hello
"""

RETURN = r"""
model:
  description: What the headers say, and the set's C(parts) (paths) and C(base_name).
  returned: success
  type: dict
  sample: {"architecture": "llama", "layers": 80, "context_length": 131072, "kv_heads": 8,
           "weights_bytes": 39969853440, "tensor_count": 723, "file_size": 39970000000,
           "parts": ["/var/lib/llama-models/model.gguf"], "base_name": "model"}
plan:
  description: Where everything goes (null when O(workers) is empty).
  returned: success
  type: dict
  contains:
    n_gpu_layers:
      description: The C(-ngl) to run with; V(999) when everything but the input layer is on the workers.
      type: int
    slots:
      description: The slots (C(-np)) the plan keeps, at most O(slots).
      type: int
    slots_asked:
      description: O(slots), for a message when fewer fit.
      type: int
    server_context:
      description: llama-server's C(-c), RV(plan.slots) times the context of each.
      type: int
    tensor_split:
      description: The C(--tensor-split) proportions, one per worker (usable MiB).
      type: list
      elements: int
    master_carries_layers:
      description: Whether the master's RAM holds repeating layers too.
      type: bool
    figures:
      description: C(llama.cpp) when the needs are llama.cpp's own projection, C(estimate) when they are the collection's.
      type: str
    workers:
      description:
        - Per worker, its layers, weights (the tensors the collection places there, checked against llama.cpp's
          C(projected_weights_bytes)), caches (C(kv_bytes); C(kv_estimate_bytes) the collection's own figure),
          compute buffer, need and usable bytes.
      type: list
      elements: dict
    master:
      description:
        - The same for the master, whose weights are llama.cpp's projected figure (it repacks some types for the CPU;
          C(weights_estimate_bytes) the collection's own) and whose need counts O(master_reserved_bytes). Its need is
          also at least its weights and C(sending_bytes), the messages (each a copy of a worker's largest weight) it
          holds at once while it loads.
      type: dict
    need_bytes:
      description: The cluster's total need.
      type: int
    advice:
      description:
        - Whether fewer nodes would hold the same plan (the kept slots' KV cache included). RPC pools memory, it does not add
          compute, so a model split over more nodes than it needs runs slower.
        - C(master_alone) (bool), C(fewest_workers) (the fewest of the first workers that hold every layer; null when all are
          needed), C(workers), C(single_node_bytes) (what one node would need), C(master_usable_bytes), C(single_instance)
          and C(single_instance_memory_gib) (the smallest C8g whose memory holds that at O(memory_fraction); null when none).
      type: dict
draft:
  description: With O(draft), its projection on the master (C(path), C(bytes), and C(model), C(context) and C(compute)
    bytes), counted in RV(plan)'s master need. The plan also carries it as C(plan.draft).
  returned: when draft is given and a plan is made
  type: dict
load:
  description:
    - With O(load_figures), the predicted first load with the workers' caches C(cold) (llama.cpp sends and they store
      the weights) and C(staged) (they hold their share, so hashes travel), each C(seconds), C(bound) (the resource that
      bounds it), C(parts) (seconds of the master's read and hash, the transfer, the workers) and C(bytes_sent).
  returned: when load_figures and a plan are given
  type: dict
"""

import contextlib

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import gguf, model_arch
from ansible_collections.graviton.llama_rpc.plugins.module_utils.plan import llama_fit, load_time, tensor_split
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import speculative, tensor_cache
from ansible_collections.graviton.llama_rpc.plugins.module_utils.plan.fit_plan import (
    PROMPT_CACHE, PlanError, human, plan, tensor_plan)


def meminfo(server_pid=0):
    """The master's free and total bytes; with server_pid, that process's private memory counts as free."""
    values = {}
    with open("/proc/meminfo") as handle:
        for line in handle:
            key, _sep, rest = line.partition(":")
            values[key] = int(rest.split()[0]) * 1024
    returning = 0
    if server_pid:
        try:
            with open("/proc/%d/status" % server_pid) as handle:
                returning = next((int(line.split()[1]) * 1024 for line in handle if line.startswith("RssAnon:")), 0)
        except OSError:
            returning = 0  # it ended meanwhile: its memory is free already
    return {"free": values["MemAvailable"] + returning, "total": values["MemTotal"]}


def worker_memory(worker):
    devices = worker.get("devices") or []
    if "endpoint" not in worker or not devices:
        raise ValueError("each worker needs endpoint and devices (as rpc_probe returns them); got %r" % (worker,))
    return {"endpoint": worker["endpoint"], "free": sum(int(device["free"]) for device in devices),
            "total": sum(int(device["total"]) for device in devices)}


def projector_for(module, params, model_path, stand_ins=None):
    """llama_fit.project bound to this model and llama-server's settings, or None. stand_ins: {worker endpoint: the
    endpoint of its stand-in}, asked in its place."""
    options = params["projection"]
    if not options:
        return None
    program = options.get("program")
    flash_attn = str(options.get("flash_attn") or "auto")
    if flash_attn not in ("auto", "on", "off"):
        raise ValueError("projection.flash_attn must be auto, on or off, not %r" % flash_attn)
    stand_ins = stand_ins or {}
    worker_of = {stand_in: worker for worker, stand_in in stand_ins.items()}

    def project(endpoints, gpu_layers, split, context, slots):
        try:
            projected = llama_fit.project(module.run_command, program, model_path,
                                          [stand_ins.get(endpoint, endpoint) for endpoint in endpoints], gpu_layers, split,
                                          context, slots, flash_attn, timeout=int(options.get("timeout") or 300),
                                          split_mode=params["split_mode"])
        except llama_fit.ProjectionError as error:
            raise PlanError("llama.cpp's projection of the model failed: %s" % error)
        if "workers" in projected:
            projected["workers"] = {worker_of.get(endpoint, endpoint): figures
                                    for endpoint, figures in projected["workers"].items()}
        return projected

    return project


def draft_share(module, params, context, model_metadata):
    """The draft model's projection on the master alone ({path, bytes, model, context, compute}) for context tokens per
    slot (llama-server gives the draft the model's context), after its vocabulary is checked against the model's (its
    header's metadata, the tokens kept whole); raises PlanError naming what to change."""
    path = params["draft"].get("path") or ""
    kind = params["draft"].get("kind") or "draft-simple"
    if not params["projection"]:
        raise PlanError("a draft model is planned with llama.cpp's projection: give projection")
    try:
        draft = gguf.read_model(path, whole_arrays=(speculative.TOKENS_KEY,))
    except (OSError, gguf.GGUFError) as error:
        raise PlanError("cannot read the draft model: %s" % error)
    problem = speculative.draft_problem(kind, model_metadata, draft["metadata"],
                                        "the model (%s)" % gguf.set_base_name(params["path"]),
                                        "the draft (%s)" % gguf.set_base_name(path))
    if problem and kind == "draft-simple":
        raise PlanError("the draft model cannot draft for the model: %s (llama-server would drop it and serve without "
                        "speculative decoding, saying so only in its log). "
                        "Set rpc_master_spec_draft_src to a draft of the model's own family (the same tokenizer), or "
                        "rpc_master_spec_type to an n-gram kind, which needs no draft" % problem)
    if problem:
        raise PlanError("the draft model cannot draft for the model: %s (llama.cpp refuses it). Set "
                        "rpc_master_spec_draft_src to a %s draft made for this model, or rpc_master_spec_type to "
                        "draft-simple with a small model of its family, or to an n-gram kind" % (problem, kind))
    options = params["projection"]
    try:
        projected = llama_fit.project(module.run_command, options.get("program"), path, [], 0, [],
                                      context * params["slots"], params["slots"], str(options.get("flash_attn") or "auto"),
                                      timeout=int(options.get("timeout") or 300))
    except llama_fit.ProjectionError as error:
        raise PlanError("llama.cpp's projection of the draft model failed: %s" % error)
    figures = projected["master"]
    return {"path": path, "bytes": sum(figures.values()), "model": figures["model"], "context": figures["context"],
            "compute": figures["compute"]}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            workers=dict(type="list", elements="dict", required=True),
            context_size=dict(type="int", default=0),
            slots=dict(type="int", default=1),
            ubatch_size=dict(type="int", default=512),
            memory_fraction=dict(type="float", default=0.75),
            master_memory=dict(type="dict"),
            server_pid=dict(type="int", default=0),
            master_reserved_bytes=dict(type="int", default=0),
            projection=dict(type="dict"),
            draft=dict(type="dict"),
            split_mode=dict(type="str", choices=["layer", "tensor"], default="layer"),
            master_share=dict(type="str", default=""),
            plan=dict(type="dict"),
            load_figures=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if not 0 < params["memory_fraction"] <= 1:
        module.fail_json(msg="memory_fraction must be above 0 and at most 1, got %s" % params["memory_fraction"])
    if params["context_size"] < 0 or params["ubatch_size"] < 1 or params["slots"] < 1 or params["master_reserved_bytes"] < 0:
        module.fail_json(msg="context_size and master_reserved_bytes must be 0 or more, ubatch_size and slots 1 or more")
    try:
        workers = [worker_memory(worker) for worker in params["workers"]]
    except ValueError as error:
        module.fail_json(msg=str(error))
    share = params["master_share"]
    if share and (params["split_mode"] != "tensor" or share not in [worker["endpoint"] for worker in workers]):
        module.fail_json(msg="master_share=%s: the master's share is one of the workers' endpoints (%s), in split_mode "
                         "tensor only" % (share, ", ".join(worker["endpoint"] for worker in workers) or "none given"))
    try:
        # a draft's vocabulary is compared with the model's tokens: read whole only then
        model = gguf.read_model(params["path"], whole_arrays=(speculative.TOKENS_KEY,)
                                if (params["draft"] or {}).get("path") else ())
        shape = model_arch.shape(model)
    except (OSError, gguf.GGUFError, model_arch.ArchError) as error:
        # the hint about other formats follows only a file that is no GGUF at all: a set's parts that do not belong
        # together, or a damaged file, name their own fix
        hint = (". llama.cpp loads GGUF files only: point at a .gguf model (convert others with llama.cpp's "
                "convert_hf_to_gguf.py)" if getattr(error, "not_gguf", False) else "")
        module.fail_json(msg="cannot read the model: %s%s" % (error, hint))
    context = params["context_size"] or shape["context_length"]
    if not context:
        module.fail_json(msg="the model states no context length: set the context size explicitly")
    info = {key: value for key, value in shape.items() if key not in ("layer_bytes", "kv")}
    info.update(file_size=model["file_size"], parts=[part["path"] for part in model["parts"]],
                base_name=gguf.set_base_name(params["path"]))
    refused = speculative.model_problem((params["draft"] or {}).get("kind"), shape, "the model (%s)" % info["base_name"])
    if refused:
        module.fail_json(msg="%s. Set rpc_master_spec_type to a kind that drafts otherwise: an n-gram kind, or "
                         "draft-simple with a small model of its family" % refused, model=info)
    if params["split_mode"] == "tensor" and workers:
        refused = tensor_split.problems(shape["architecture"], shape["kv_heads_min"] or None, len(workers),
                                        "the model (%s)" % info["base_name"])
        if refused:
            module.fail_json(msg=" ".join(refused), model=info)
    if not workers and not params["plan"]:
        module.exit_json(changed=False, model=info, plan=None)
    if params["plan"]:
        result = params["plan"]
    else:
        master = params["master_memory"] or meminfo(params["server_pid"])
        stand_in_program = (params["projection"] or {}).get("stand_ins")
        try:
            with contextlib.ExitStack() as stack:
                stand_ins = {}
                if stand_in_program:
                    started = stack.enter_context(llama_fit.stand_ins(module.run_command, stand_in_program, len(workers)))
                    stand_ins = dict(zip((worker["endpoint"] for worker in workers), started))
                projector = projector_for(module, params, params["path"], stand_ins)
                reserved, reserved_what, draft = params["master_reserved_bytes"], PROMPT_CACHE, None
                if params["draft"] and params["draft"].get("path"):
                    draft = draft_share(module, params, context, model["metadata"])
                    reserved_what = ("%s %s and the draft model" % (PROMPT_CACHE, human(reserved))
                                     if reserved else "the draft model")
                    reserved += draft["bytes"]
                if params["split_mode"] == "tensor":
                    result = tensor_plan(shape, tensor_split.worker_bounds(model, shape, len(workers)), context, workers,
                                         master, params["memory_fraction"], params["slots"], projector=projector,
                                         master_reserved=reserved, reserved_what=reserved_what,
                                         master_share=share or None)
                else:
                    result = plan(shape, context, params["ubatch_size"], workers, master, params["memory_fraction"],
                                  params["slots"], projector=projector, master_reserved=reserved,
                                  reserved_what=reserved_what, parallel_sends=load_time.known_hashes(params["load_figures"]))
                if draft:
                    result["draft"] = draft
        except llama_fit.ProjectionError as error:
            module.fail_json(msg="llama.cpp's projection of the model failed: %s" % error, model=info)
        except (PlanError, ValueError) as error:
            module.fail_json(msg=str(error), model=info)
    load = None
    if params["load_figures"] and result.get("split_mode", "layer") == "layer":
        figures = params["load_figures"]
        missing = [key for key in ("master_disk_read", "worker_disk_read", "worker_disk_write", "network_rate")
                   if not figures.get(key)]
        if missing:
            module.fail_json(msg="load_figures needs %s (bytes per second)" % ", ".join(missing))
        shares = tensor_cache.assign(tensor_cache.hashed_tensors(model), result)
        load = {state: load_time.for_plan(model, result, shares, figures, state) for state in ("cold", "staged")}
    module.exit_json(changed=False, model=info, plan=result, load=load, draft=result.get("draft"))


if __name__ == "__main__":
    main()
