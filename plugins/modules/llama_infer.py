#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_infer
short_description: One-shot inference through llama.cpp RPC workers, with structured results
version_added: 0.1.0
description:
  - Runs C(llama-completion) on the master with C(--rpc), C(-ngl), C(-fit off), the prompt, the token
    count, the seed and the sampling options, and returns the generated text and figures parsed from
    llama.cpp's log (load time, prompt and generation tokens per second, and each device's buffers).
  - llama-completion sometimes exits 0 having lost the last lines of its log (an unflushed logger), so
    the figures are missing. Such a run is retried (O(attempts)), never returned as a result.
  - C(GGML_NO_BACKTRACE=1) is set, so a crash never starts gdb on the master.
  - Inference changes nothing on the host; the module reports C(changed=false). In check mode it does
    not run.
author:
  - graviton.llama_rpc developers (@graviton)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - graviton.llama_rpc.attributes
  - graviton.llama_rpc.rpc_workers
options:
  binary:
    description: The C(llama-completion) program.
    type: path
    required: true
  model:
    description: The GGUF model on the master.
    type: path
    required: true
  prompt:
    description: The prompt text. One of O(prompt) and O(prompt_file).
    type: str
  prompt_file:
    description: A file on the master holding the prompt.
    type: path
  n_predict:
    description: How many tokens to generate.
    type: int
    default: 64
  seed:
    description: The sampling seed (the same seed, model and options give the same text).
    type: int
    default: 42
  temperature:
    description: Sampling temperature.
    type: float
    default: 0.8
  top_k:
    description: Top-k sampling.
    type: int
    default: 40
  top_p:
    description: Top-p sampling.
    type: float
    default: 0.95
  context_size:
    description: The context size (C(-c)). V(0) is the model's own.
    type: int
    default: 0
  threads:
    description: Master threads (C(-t)). Default, llama.cpp's choice.
    type: int
  n_gpu_layers:
    description: Layers to put on the workers (C(-ngl)); V(999) is all of them.
    type: int
    default: 999
  tensor_split:
    description: Proportions per worker (C(-ts)), for example from M(graviton.llama_rpc.gguf_plan).
    type: list
    elements: int
  split_mode:
    description:
      - How the model is split across the workers (C(-sm)); V(tensor) shares every layer among them (with flash
        attention, which it requires), as M(graviton.llama_rpc.gguf_plan) plans it with its O(split_mode).
    type: str
    choices: [layer, tensor]
    default: layer
  fit:
    description:
      - Let llama.cpp size the split itself (C(-fit on), its default), which loads the model twice.
        Default off, since the plan from M(graviton.llama_rpc.gguf_plan) has already sized it.
    type: bool
    default: false
  extra_args:
    description: More llama-completion arguments.
    type: list
    elements: str
    default: []
  attempts:
    description: Runs to try when a run loses its output.
    type: int
    default: 3
  timeout:
    description: Seconds one run may take (a 70B model loads for minutes).
    type: int
    default: 3600
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Generate 64 tokens through the workers
  graviton.llama_rpc.llama_infer:
    binary: /opt/llama.cpp/current/bin/llama-completion
    model: /var/lib/llama-models/model.gguf
    workers: [10.0.1.11:50052, 10.0.1.12:50052]
    prompt: The capital of France is
    n_predict: 64
  register: answer

- name: Show the figures
  ansible.builtin.debug:
    msg: "{{ answer.text }} ({{ answer.figures.eval_tps }} tokens/s)"
"""

RETURN = r"""
text:
  description: The generated text (without the prompt). Bytes that are not UTF-8 are replaced.
  returned: success
  type: str
figures:
  description: load_ms, prompt_ms, prompt_tokens, prompt_tps, eval_ms, eval_runs, eval_tps, wall_s.
  returned: success
  type: dict
  sample: {"load_ms": 489500.0, "prompt_tps": 5.39, "eval_tps": 1.75, "eval_runs": 63, "wall_s": 530.2}
buffers:
  description: Bytes per device and kind (model, KV, compute); RPC devices by their worker's endpoint.
  returned: success
  type: dict
  sample: {"10.0.1.11:50052": {"model": 19700000000, "KV": 671088640, "compute": 1720000}}
workers_without_model:
  description: Workers that received no model buffer (an empty list when every worker holds layers).
  returned: success
  type: list
  elements: str
attempts:
  description: Runs made (more than 1 when a run lost its output).
  returned: always
  type: int
command:
  description: The command that ran.
  returned: always
  type: list
  elements: str
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import llama_log, llama_run
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp.rpc_protocol import MAX_WORKERS


def command_line(params):
    command = [params["binary"], "-m", params["model"], "--rpc", ",".join(params["workers"]),
               "-ngl", str(params["n_gpu_layers"]), "-fit", "on" if params["fit"] else "off",
               "-n", str(params["n_predict"]), "--seed", str(params["seed"]), "--temp", str(params["temperature"]),
               "--top-k", str(params["top_k"]), "--top-p", str(params["top_p"]), "-c", str(params["context_size"]),
               # -no-cnv: one-shot, no chat loop; -lv 4: the log lines the figures come from
               "-no-cnv", "--no-display-prompt", "-lv", "4"]
    if params["prompt_file"]:
        command += ["-f", params["prompt_file"]]
    else:
        command += ["-p", params["prompt"]]
    if params["threads"]:
        command += ["-t", str(params["threads"])]
    if params["tensor_split"]:
        command += ["-ts", ",".join(str(share) for share in params["tensor_split"])]
    if params["split_mode"] == "tensor":
        command += ["-sm", "tensor", "-fa", "on"]
    return command + params["extra_args"]


def check(module):
    params = module.params
    problems = []
    if not 1 <= len(params["workers"]) <= MAX_WORKERS:
        problems.append("workers has %d entries; llama.cpp uses 1 to %d" % (len(params["workers"]), MAX_WORKERS))
    # In check mode the roles before this one may not have installed the program or the model yet.
    for option in ("binary", "model"):
        if not module.check_mode and not os.path.isfile(params[option]):
            problems.append("%s %s does not exist on this host" % (option, params[option]))
    if params["prompt_file"] and not module.check_mode and not os.path.isfile(params["prompt_file"]):
        problems.append("prompt_file %s does not exist on this host" % params["prompt_file"])
    if params["tensor_split"] and len(params["tensor_split"]) != len(params["workers"]):
        problems.append("tensor_split has %d entries for %d workers" % (len(params["tensor_split"]), len(params["workers"])))
    if params["n_predict"] < 1 or params["attempts"] < 1 or params["timeout"] < 1:
        problems.append("n_predict, attempts and timeout must be 1 or more")
    if problems:
        module.fail_json(msg="; ".join(problems))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            binary=dict(type="path", required=True),
            model=dict(type="path", required=True),
            workers=dict(type="list", elements="str", required=True),
            prompt=dict(type="str"),
            prompt_file=dict(type="path"),
            n_predict=dict(type="int", default=64),
            seed=dict(type="int", default=42),
            temperature=dict(type="float", default=0.8),
            top_k=dict(type="int", default=40),
            top_p=dict(type="float", default=0.95),
            context_size=dict(type="int", default=0),
            threads=dict(type="int"),
            n_gpu_layers=dict(type="int", default=999),
            tensor_split=dict(type="list", elements="int"),
            split_mode=dict(type="str", choices=["layer", "tensor"], default="layer"),
            fit=dict(type="bool", default=False),
            extra_args=dict(type="list", elements="str", default=[]),
            attempts=dict(type="int", default=3),
            timeout=dict(type="int", default=3600),
        ),
        mutually_exclusive=[("prompt", "prompt_file")],
        required_one_of=[("prompt", "prompt_file")],
        supports_check_mode=True,
    )
    check(module)
    command = command_line(module.params)
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: inference not run", attempts=0, command=command)

    for attempt in range(1, module.params["attempts"] + 1):
        started = time.monotonic()
        stdout, log = llama_run.run(module, command, module.params["timeout"], attempts=attempt)
        wall = time.monotonic() - started
        if llama_log.complete(log):
            break
    else:
        module.fail_json(msg="llama-completion lost its output in all %d runs (exit 0, no timing lines); log end: %s"
                         % (module.params["attempts"], log[-2000:]), attempts=module.params["attempts"], command=command)

    figures = llama_log.perf(log)
    figures["wall_s"] = round(wall, 3)
    buffers = llama_log.buffers(log)
    module.exit_json(
        changed=False,
        # random or small models generate bytes that are not UTF-8
        text=stdout.decode("utf-8", errors="replace"),
        figures=figures,
        buffers=buffers,
        workers_without_model=[worker for worker in module.params["workers"] if "model" not in buffers.get(worker, {})],
        attempts=attempt,
        command=command,
    )


if __name__ == "__main__":
    main()
