# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: cpu_probe_problem
short_description: What is wrong with a llama.cpp build on a host, from its CPU probe's run
version_added: 0.2.0
description:
  - Takes the registered result of a build's C(bin/llama-cpu-probe) run on the host (with C(failed_when) false), and
    returns an empty string when the build is right for the host, else one sentence that names the host, what is
    wrong, and what to check.
  - Right means three things. The probe ran to its end. Its C(system_info) line, read the way llama.cpp's own line is
    read, reports every CPU feature the build's flags promise as C(= 1). And its matrix product through ggml's kernels
    matched plain C.
options:
  _input:
    description: The registered result of the probe (C(rc), C(stdout), C(stderr)).
    type: dict
    required: true
  promised:
    description: The features the build's flags promise (the build record's C(system_info)).
    type: list
    elements: str
    required: true
  host:
    description: C(inventory_hostname).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Check that the flags' features are compiled in and that ggml computes right on this CPU
  ansible.builtin.assert:
    that: _problem | length == 0
    fail_msg: "{{ _problem }}"
  vars:
    _problem: "{{ probe | graviton.llama_rpc.cpu_probe_problem(record.system_info, inventory_hostname) }}"
"""

RETURN = r"""
_value:
  description: The problem and what to check, or an empty string.
  type: str
"""

import signal

from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp import llama_log

FLAGS = "check llama_build_cmake_args and the compiler"


def cpu_probe_problem(result, promised, host):
    result = result or {}
    stdout, stderr = str(result.get("stdout") or ""), str(result.get("stderr") or "")
    rc = result.get("rc")
    said = _last_line(stdout + "\n" + stderr)
    if isinstance(rc, int) and rc < 0:
        name = _signal_name(-rc)
        why = " (an instruction this CPU does not have)" if name == "SIGILL" else ""
        return (f"{host}: the build's CPU probe died with {name}{why}: this build cannot run on {host}'s CPU; "
                f"{FLAGS}. It said: {said}")
    reported = llama_log.system_info(stdout)
    if not reported:
        return f"{host}: the build's CPU probe printed no system_info line (exit {rc}); {FLAGS}. It said: {said}"
    missing = [feature for feature in promised if reported.get(feature) != "1"]
    if missing:
        return (f"{host}: the build reports {llama_log.system_info_line(stdout)}, but its flags promise {', '.join(promised)} = 1; "
                f"missing: {', '.join(missing)}. The compiler ignored the flags ({FLAGS}).")
    if rc != 0:
        return (f"{host}: ggml's matrix product differs from plain C ({said}): this build computes wrong on "
                f"{host}'s CPU; {FLAGS}.")
    return ""


def _last_line(text):
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][-300:] if lines else "nothing"


def _signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class FilterModule:
    def filters(self):
        return {"cpu_probe_problem": cpu_probe_problem}
