# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: model_parts
short_description: The parts of a model source, where each goes and its checksum, and what is wrong with the inputs
version_added: 0.1.0
description:
  - Takes C(rpc_master_model_src), a path on the master, an http(s):// URL or s3://bucket/key of one GGUF file or of a
    multi-part set's first part (C(NAME-00001-of-0000N.gguf); the other parts are found by name beside it, as llama.cpp
    finds them), or a list of a set's parts.
  - Returns each part's source, its name on the master (a path's own; for a download llama.cpp's name, renamed as
    O(name) asks with the pattern kept, in the release M(graviton.llama_rpc.model_fetch) makes of it) and its sha256,
    and every problem of the inputs, each naming the variable and the fix.
options:
  _input:
    description: The source (C(rpc_master_model_src)), a string or a list.
    type: raw
    required: true
  sha256:
    description: One sha256, or a list of one per part.
    type: raw
    default: ""
  sha256sums:
    description: A checksum file in sha256sum's format that names the parts (path, URL or s3://).
    type: str
    default: ""
  name:
    description: The downloaded model's name (C(rpc_master_model_name)); empty, the source's.
    type: str
    default: ""
  variables:
    description: The prefix of the variables the problems name (C(_src), C(_sha256), C(_sha256sums), C(_name) after it),
      V(rpc_master_spec_draft) for the draft model of speculative decoding.
    type: str
    default: rpc_master_model
"""

EXAMPLES = r"""
- name: Work out the model's parts
  ansible.builtin.set_fact:
    model: >-
      {{ 'https://huggingface.co/org/repo/resolve/main/model-00001-of-00003.gguf'
         | graviton.llama_rpc.model_parts(sha256sums='https://huggingface.co/org/repo/resolve/main/SHA256SUMS') }}
"""

RETURN = r"""
_value:
  description: C(kind) (path, url, s3 or unknown), C(parts) (each C(number), C(src), C(name) as published, C(file) on
    the master, C(sha256), and for a path C(dest)), C(model_path) (what llama.cpp loads, a path's first part; empty for a
    download, whose release gives it), C(base_name), C(checksums) and C(problems).
  type: dict
"""

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import model_source


def model_parts(source, sha256="", sha256sums="", name="", variables="rpc_master_model"):
    return model_source.parts(source, sha256 or "", sha256sums or "", name or "", variables or "rpc_master_model")


class FilterModule:
    def filters(self):
        return {"model_parts": model_parts}
