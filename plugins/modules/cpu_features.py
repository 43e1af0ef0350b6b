#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cpu_features
short_description: Detect the CPU and the llama.cpp build flags that match it
version_added: 0.1.0
description:
  - Reads C(/proc/cpuinfo) and returns the architecture, the CPU feature set, a recognised CPU name
    (Graviton2/3/4, Neoverse N1/V1/V2, or generic) and the CMake arguments that build llama.cpp's
    ggml for exactly that feature set.
  - On aarch64 the flags are C(GGML_NATIVE=OFF) with C(GGML_CPU_ARM_ARCH) from the best tier whose
    features the CPU has all of (Graviton4 C(armv9-a+i8mm+bf16), Graviton3 C(armv8.4-a+sve+i8mm+bf16+fp16),
    Graviton2 C(armv8.2-a+dotprod+fp16), else C(armv8-a)). On x86_64 they are explicit C(GGML_AVX*),
    C(GGML_FMA), C(GGML_F16C), C(GGML_BMI2) options. Hosts with the same RV(target_id) run the same binaries.
  - Only reads; supports check mode.
author:
  - graviton.llama_rpc developers (@graviton)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - graviton.llama_rpc.attributes
options:
  cpuinfo_path:
    description: Where to read the cpuinfo text.
    type: path
    default: /proc/cpuinfo
  architecture:
    description:
      - The machine architecture (C(aarch64) or C(x86_64); C(arm64) and C(amd64) are accepted).
      - Defaults to the architecture of the host the module runs on.
    type: str
  dmi_vendor_path:
    description:
      - File holding the system vendor. V(Amazon EC2) there turns a Neoverse core name into its Graviton name.
    type: path
    default: /sys/devices/virtual/dmi/id/sys_vendor
  arm_arch:
    description:
      - Overrides the detected C(-march) on aarch64, for example V(armv8.2-a+dotprod+fp16) to build once
        for a mixed fleet. The features it needs that the CPU lacks are returned in RV(missing_features).
    type: str
  native:
    description:
      - Build with C(GGML_NATIVE=ON) (C(-mcpu=native)) instead of explicit flags. Only hosts with an
        identical CPU then share a build.
    type: bool
    default: false
  extra_cmake_args:
    description:
      - CMake arguments appended to the computed ones. On x86_64, C(-DGGML_<OPTION>=ON|OFF) for an
        instruction-set option replaces the detected setting and is checked against the CPU.
    type: list
    elements: str
    default: []
  build_record:
    description:
      - Path of a llama.cpp build's C(build-record.json) (written by the llama_build role). The module then
        fails if this CPU lacks a feature the build was compiled for, instead of letting the build die with
        an illegal instruction, and returns the record as RV(build).
    type: path
  builds_dir:
    description:
      - The directory the llama_build role installs builds into (its C(llama_build_prefix)). The module then also
        returns the builds there, each record read and checked against this CPU (RV(installed_builds)), and the
        one its C(current) link names (RV(current_build)), so a deploy learns what the host has in this one run.
      - A directory that does not exist has no builds.
    type: path
    version_added: 0.2.0
attributes:
  check_mode:
    support: full
notes:
  - Neoverse V2 is Graviton4 on EC2, but also NVIDIA Grace and other chips; the name is only a label, the
    flags come from the features.
"""

EXAMPLES = r"""
- name: Detect the CPU
  graviton.llama_rpc.cpu_features:
  register: cpu

- name: Refuse a build this CPU cannot run
  graviton.llama_rpc.cpu_features:
    build_record: /opt/llama.cpp/b11312-aarch64-0123456789/build-record.json

- name: Detect the CPU and read the builds installed under /opt/llama.cpp
  graviton.llama_rpc.cpu_features:
    builds_dir: /opt/llama.cpp
  register: cpu

- name: Show the flags llama.cpp will be built with
  ansible.builtin.debug:
    msg: "{{ cpu.cpu_name }}: {{ cpu.cmake_args | join(' ') }}"
"""

RETURN = r"""
architecture:
  description: The normalised machine architecture.
  returned: success
  type: str
  sample: aarch64
features:
  description: The CPU features (cpuinfo C(Features) on aarch64, C(flags) on x86_64), sorted.
  returned: success
  type: list
  elements: str
  sample: [aes, asimd, asimddp, bf16, i8mm, sve, sve2]
cpu_name:
  description: A recognised CPU name (Graviton2/3/4 on EC2, a Neoverse core, an x86 model name, or generic).
  returned: success
  type: str
  sample: Graviton4
core:
  description: The Arm core recognised from the implementer and part number; null on x86_64 or an unknown core.
  returned: success
  type: str
  sample: Neoverse V2
vendor:
  description: Amazon on EC2 Graviton, Arm for other known Arm cores, the cpuinfo vendor_id on x86_64.
  returned: success
  type: str
  sample: Amazon
arm_arch:
  description: The -march value given to ggml as GGML_CPU_ARM_ARCH; null on x86_64.
  returned: success
  type: str
  sample: armv9-a+i8mm+bf16
cmake_args:
  description: The CMake arguments that build ggml for this feature set (with O(extra_cmake_args) at the end).
  returned: success
  type: list
  elements: str
  sample: ["-DGGML_NATIVE=OFF", "-DGGML_CPU_ARM_ARCH=armv9-a+i8mm+bf16"]
missing_features:
  description: The RV(required_features) that this CPU lacks. Not empty means the flags do not fit this CPU.
  returned: success
  type: list
  elements: str
  sample: [sve2]
required_features:
  description: The CPU features a host must have to run binaries built with RV(cmake_args).
  returned: success
  type: list
  elements: str
  sample: [asimd, asimddp, bf16, i8mm, sve, sve2, svebf16, svei8mm]
system_info:
  description: The ggml CPU features llama.cpp must report as 1 in its system_info line for such a build.
  returned: success
  type: list
  elements: str
  sample: [NEON, ARM_FMA, DOTPROD, MATMUL_INT8, SVE]
build:
  description: The build record read from O(build_record).
  returned: when O(build_record) is set and this CPU can run the build
  type: dict
  sample: {"id": "b11312-aarch64-0123456789", "required_features": ["asimd", "sve2"]}
build_args:
  description:
    - The O(extra_cmake_args) that are not CPU options (x86 C(GGML_AVX*)-style options are taken out).
    - They change what is built on every CPU alike, so hosts of one cluster must agree on them.
  returned: success
  type: list
  elements: str
  sample: ["-DGGML_OPENMP=OFF"]
installed_builds:
  description:
    - The builds in O(builds_dir) (its directories named C(b*-*)), by name. Each has C(name), C(path), C(mtime),
      C(recorded) (it has a C(build-record.json), so it was installed whole), C(record) (that record, null when
      there is none or it cannot be read) and C(problem), why it must not run here (its record cannot be read, or
      this CPU lacks a feature it was compiled for), empty when it may.
  returned: when O(builds_dir) is set
  type: dict
  version_added: 0.2.0
  sample:
    b11312-aarch64-0123456789:
      name: b11312-aarch64-0123456789
      path: /opt/llama.cpp/b11312-aarch64-0123456789
      mtime: 1764400000.0
      recorded: true
      record: {"id": "b11312-aarch64-0123456789"}
      problem: ""
current_build:
  description: The name of the build the C(current) link in O(builds_dir) points to; empty when there is no such link.
  returned: when O(builds_dir) is set
  type: str
  version_added: 0.2.0
  sample: b11312-aarch64-0123456789
target_id:
  description: Identifies the build target; hosts with the same value can share one build.
  returned: success
  type: str
  sample: aarch64-1f0e3dad
"""

import fnmatch
import json
import os
import platform

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.graviton.llama_rpc.plugins.module_utils.host.cpu_flags import CpuInfoError, build_refusal, describe_cpu


def read_text(path):
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def read_dmi_vendor(path):
    """The system vendor, or "" where there is no DMI (containers, some VMs)."""
    try:
        return read_text(path)
    except OSError:
        return ""


def check_record(path, cpu, label):
    """(the build record at path, why this CPU must not run the build: "" when it may). label names the path in the
    message."""
    try:
        record = json.loads(read_text(path))
    except (OSError, ValueError) as error:
        return None, "cannot read the build record %s: %s" % (label, to_native(error))
    refusal = build_refusal(record, cpu)
    return record, (refusal + ". It would die with an illegal instruction here, so it is refused." if refusal else "")


def installed_builds(builds_dir, cpu):
    """The builds in builds_dir as RV(installed_builds) describes them, and the name its current link points to."""
    builds = {}
    try:
        entries = sorted(os.scandir(builds_dir), key=lambda entry: entry.name)
    except FileNotFoundError:
        return builds, ""
    for entry in entries:
        if not fnmatch.fnmatchcase(entry.name, "b*-*") or not entry.is_dir(follow_symlinks=False):
            continue
        record_path = os.path.join(entry.path, "build-record.json")
        recorded = os.path.lexists(record_path)
        record, problem = check_record(record_path, cpu, record_path) if recorded else (None, "")
        builds[entry.name] = dict(name=entry.name, path=entry.path, mtime=entry.stat().st_mtime, recorded=recorded,
                                  record=record, problem=problem)
    current = os.path.join(builds_dir, "current")
    return builds, (os.readlink(current) if os.path.islink(current) else "")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cpuinfo_path=dict(type="path", default="/proc/cpuinfo"),
            architecture=dict(type="str"),
            dmi_vendor_path=dict(type="path", default="/sys/devices/virtual/dmi/id/sys_vendor"),
            arm_arch=dict(type="str"),
            native=dict(type="bool", default=False),
            extra_cmake_args=dict(type="list", elements="str", default=[]),
            build_record=dict(type="path"),
            builds_dir=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    path = module.params["cpuinfo_path"]
    try:
        cpuinfo = read_text(path)
    except OSError as error:
        module.fail_json(msg="cannot read cpuinfo_path %s: %s" % (path, to_native(error)))
    architecture = module.params["architecture"] or platform.machine()
    vendor = read_dmi_vendor(module.params["dmi_vendor_path"])
    try:
        result = describe_cpu(cpuinfo, architecture, vendor, arm_arch=module.params["arm_arch"],
                              native=module.params["native"], extra_cmake_args=module.params["extra_cmake_args"])
    except CpuInfoError as error:
        module.fail_json(msg="%s (cpuinfo_path=%s, architecture=%s)" % (to_native(error), path, architecture))
    if module.params["build_record"]:
        record_path = module.params["build_record"]
        record, problem = check_record(record_path, result, "build_record=" + record_path)
        if problem:
            module.fail_json(msg=problem, **result)
        result["build"] = record
    if module.params["builds_dir"]:
        builds_dir = module.params["builds_dir"]
        try:
            result["installed_builds"], result["current_build"] = installed_builds(builds_dir, result)
        except OSError as error:
            module.fail_json(msg="cannot read the builds in builds_dir=%s: %s" % (builds_dir, to_native(error)), **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
