#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_bench
short_description: Run llama-bench (through RPC workers or on this host alone) and return its figures
version_added: 0.1.0
description:
  - Runs C(llama-bench -o json) with the model, the prompt and generation sizes and the repetitions, through
    the given RPC workers (C(--rpc), all layers on them) or, with no workers, on this host alone, and returns
    one row per test (C(pp<N>) prompt processing, C(tg<N>) generation) with tokens per second.
  - C(GGML_NO_BACKTRACE=1) is set. It changes nothing on the host (C(changed=false)); in check mode it does not run.
author:
  - graviton.llama_rpc developers (@graviton)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - graviton.llama_rpc.attributes
options:
  binary:
    description: The C(llama-bench) program.
    type: path
    required: true
  model:
    description: The GGUF model.
    type: path
    required: true
  workers:
    description: RPC workers (C(host:port)), 0 to 16; none means this host alone.
    type: list
    elements: str
    default: []
  n_prompt:
    description: Prompt sizes to test (C(-p)); V(0) skips prompt processing.
    type: list
    elements: int
    default: [512]
  n_gen:
    description: Generation sizes to test (C(-n)); V(0) skips generation.
    type: list
    elements: int
    default: [128]
  repetitions:
    description: Runs per test (C(-r)).
    type: int
    default: 3
  threads:
    description: Threads on this host (C(-t)). Default, llama-bench's.
    type: int
  split_mode:
    description:
      - How the model is split across O(workers) (C(-sm)); V(tensor) shares every layer among them, with flash
        attention (C(-fa 1)), which it requires. Ignored without workers.
    type: str
    choices: [layer, tensor]
    default: layer
  timeout:
    description: Seconds the whole run may take.
    type: int
    default: 7200
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Prompt processing and generation through two workers
  graviton.llama_rpc.llama_bench:
    binary: /opt/llama.cpp/current/bin/llama-bench
    model: /var/lib/llama-models/model.gguf
    workers: [10.0.1.11:50052, 10.0.1.12:50052]
    n_prompt: [512]
    n_gen: [128]
  register: bench
"""

RETURN = r"""
rows:
  description: One per test; C(workers) is how many workers it ran through (V(0), this host alone).
  returned: success
  type: list
  elements: dict
  sample: [{"test": "tg128", "workers": 2, "split_mode": "layer", "n_prompt": 0, "n_gen": 128, "tokens_per_second": 1.75, "stddev": 0.02, "samples": 3,
            "n_threads": 16, "n_gpu_layers": 999, "model_size": 39969853440, "build": "11312 (0c1e57098)"}]
command:
  description: The command that ran.
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import llama_run
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp.bench_results import BenchError, parse_llama_bench
from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp.rpc_protocol import MAX_WORKERS


def command_line(params):
    command = [params["binary"], "-m", params["model"], "-o", "json", "-r", str(params["repetitions"]),
               "-p", ",".join(str(size) for size in params["n_prompt"]), "-n", ",".join(str(size) for size in params["n_gen"])]
    if params["workers"]:
        command += ["--rpc", ",".join(params["workers"]), "-ngl", "999"]
        if params["split_mode"] == "tensor":
            command += ["-sm", "tensor", "-fa", "1"]
    else:
        command += ["-ngl", "0"]
    if params["threads"]:
        command += ["-t", str(params["threads"])]
    return command


def main():
    module = AnsibleModule(
        argument_spec=dict(
            binary=dict(type="path", required=True),
            model=dict(type="path", required=True),
            workers=dict(type="list", elements="str", default=[]),
            n_prompt=dict(type="list", elements="int", default=[512]),
            n_gen=dict(type="list", elements="int", default=[128]),
            repetitions=dict(type="int", default=3),
            threads=dict(type="int"),
            split_mode=dict(type="str", choices=["layer", "tensor"], default="layer"),
            timeout=dict(type="int", default=7200),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if len(params["workers"]) > MAX_WORKERS:
        module.fail_json(msg="workers has %d entries; llama.cpp uses at most %d" % (len(params["workers"]), MAX_WORKERS))
    if params["repetitions"] < 1 or not params["n_prompt"] or not params["n_gen"]:
        module.fail_json(msg="repetitions must be 1 or more, n_prompt and n_gen non-empty")
    command = command_line(params)
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: llama-bench not run", command=command)
    for option in ("binary", "model"):
        if not os.path.isfile(params[option]):
            module.fail_json(msg="%s %s does not exist on this host" % (option, params[option]), command=command)
    stdout, _log = llama_run.run(module, command, params["timeout"])
    try:
        rows = parse_llama_bench(stdout.decode("utf-8", "replace"))
    except BenchError as error:
        module.fail_json(msg=str(error), command=command)
    for row in rows:
        row["workers"] = len(params["workers"])  # 0: this host alone
        row["split_mode"] = params["split_mode"] if params["workers"] else "none"
    module.exit_json(changed=False, rows=rows, command=command)


if __name__ == "__main__":
    main()
