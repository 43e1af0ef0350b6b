#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bench_report
short_description: Write a cluster benchmark's result as JSON, Markdown and a PNG chart; compare two results
version_added: 0.1.0
description:
  - With O(results), writes C(<name>.json) (every figure), C(<name>.md) (tables) and C(<name>.png) (tokens per
    second against the number of workers, and the model loads by worker cache state, each split into its parts) into
    O(dest), and, with O(compare_with), the ratios of every common figure against that earlier result.
  - A result's C(load) gains C(breakdown) (per cache state, the master's read and hash, the transfer, the workers' cache
    writes and the rest, in ms) and C(summary) (staged load over cold, bytes sent for the staged load as a fraction of
    the model, the staging's rate and its fraction of the raw TCP rate summed over the workers).
  - With O(compare) alone, reads two result files and returns the ratios (after / before).
  - Runs where the files are (usually the controller, delegated to localhost). The chart needs matplotlib.
author:
  - graviton.llama_rpc developers (@graviton)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - graviton.llama_rpc.attributes
options:
  results:
    description: The result to write (see the role C(bench)).
    type: dict
  dest:
    description: The results directory.
    type: path
  name:
    description: File name without extension.
    type: str
    default: bench
  compare_with:
    description: An earlier result file to compare O(results) with.
    type: path
  compare:
    description: Two result files, before and after, to compare (nothing is written).
    type: list
    elements: path
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Compare a run before and after a change
  graviton.llama_rpc.bench_report:
    compare: [results/bench-before.json, results/bench-after.json]
  register: comparison
"""

RETURN = r"""
files:
  description: The report's files (JSON, Markdown, PNG); only those whose content changed are written.
  returned: when results are given
  type: list
  elements: str
markdown:
  description: The report.
  returned: when results are given
  type: str
comparison:
  description: Per common figure, before, after and the ratio after / before.
  returned: when there is something to compare
  type: list
  elements: dict
comparison_text:
  description: The comparison as aligned lines.
  returned: when there is something to compare
  type: str
"""

import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp.bench_results import BenchError, chart, compare, load_breakdown, markdown


def load(module, path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError) as error:
        module.fail_json(msg="cannot read the result file %s: %s" % (path, error))


def write_if_changed(module, path, content):
    """Puts the bytes at path (a temporary file, then an atomic move) unless the file holds them already; whether it
    changed. In check mode nothing is written."""
    try:
        with open(path, "rb") as handle:
            if handle.read() == content:
                return False
    except OSError:
        pass  # no such file yet: it changes
    if not module.check_mode:
        handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".bench_report.")
        with os.fdopen(handle, "wb") as out:
            out.write(content)
        module.atomic_move(temporary, path)
    return True


def chart_bytes(module, results):
    """The chart as PNG bytes, drawn in the module's own temporary directory."""
    drawn = os.path.join(module.tmpdir, "chart.png")
    try:
        chart(results, drawn)
    except ImportError:
        module.fail_json(msg="the chart needs matplotlib on the controller: pip install matplotlib")
    with open(drawn, "rb") as handle:
        return handle.read()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            results=dict(type="dict"),
            dest=dict(type="path"),
            name=dict(type="str", default="bench"),
            compare_with=dict(type="path"),
            compare=dict(type="list", elements="path"),
        ),
        required_one_of=[("results", "compare")],
        required_together=[("results", "dest")],
        supports_check_mode=True,
    )
    params = module.params
    outcome = dict(changed=False)
    try:
        if params["compare"]:
            if len(params["compare"]) != 2:
                module.fail_json(msg="compare takes two result files: before and after")
            outcome["comparison"], outcome["comparison_text"] = compare(load(module, params["compare"][0]),
                                                                        load(module, params["compare"][1]))
        if params["results"]:
            results = params["results"]
            if results.get("load"):
                results["load"]["breakdown"], results["load"]["summary"] = load_breakdown(
                    results["load"], float(results.get("network", {}).get("raw_tcp_mbit_per_s") or 0),
                    int(results.get("model", {}).get("file_size") or 0), len(results.get("cluster", {}).get("workers", [])))
            if params["compare_with"]:
                outcome["comparison"], outcome["comparison_text"] = compare(load(module, params["compare_with"]), results)
            outcome["markdown"] = markdown(results)
            base = os.path.join(params["dest"], params["name"])
            outcome["files"] = [base + ".json", base + ".md", base + ".png"]
            if not module.check_mode:
                os.makedirs(params["dest"], exist_ok=True)
            contents = [json.dumps(results, indent=2, sort_keys=True).encode(), outcome["markdown"].encode(),
                        chart_bytes(module, results)]
            # every file is looked at (no short cut): each one that differs is written
            written = [write_if_changed(module, path, content) for path, content in zip(outcome["files"], contents)]
            outcome["changed"] = any(written)
    except BenchError as error:
        module.fail_json(msg=str(error))
    module.exit_json(**outcome)


if __name__ == "__main__":
    main()
