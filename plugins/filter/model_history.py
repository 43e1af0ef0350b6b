# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: model_history
short_description: The models a master keeps once it serves another one, and their tensors the workers' caches keep
version_added: 0.2.0
description:
  - Takes the models a master served, newest first (the local fact C(llama_rpc_master), C(releases)), and the model it
    switches to, and gives the list it keeps once that one serves (it first, then the O(keep) served most recently
    before it, those a rollback can switch back to), and for those kept, the tensors each worker's cache keeps for them.
options:
  _input:
    description: The models served, newest first, each C(name), C(kind) (C(release) or C(path)), C(model_path) and
      C(cached_hashes) (endpoint -> the cache file names the plan put on that worker).
    type: list
    elements: dict
    required: true
  entry:
    description: The model served now (the same keys).
    type: dict
    required: true
  keep:
    description: How many models served before it are kept (C(rpc_master_models_kept)).
    type: int
    default: 1
"""

EXAMPLES = r"""
- name: What the workers' caches keep for a rollback
  ansible.builtin.set_fact:
    cache_keep: >-
      {{ (ansible_local.llama_rpc_master.releases | default([])
          | graviton.llama_rpc.model_history({'name': 'tiny-3f2a9c01b2d4', 'kind': 'release'}, keep=1)).cache_keep }}
"""

RETURN = r"""
_value:
  description: C(history) (the models kept, newest first, the one served first) and C(cache_keep) (endpoint -> the
    sorted cache file names of the models kept for a rollback).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model.model_releases import after_switch


def model_history(history, entry, keep=1):
    if not isinstance(history, list) or not isinstance(entry, dict) or not entry.get("name"):
        raise AnsibleFilterError("model_history needs the models served (a list) and the one served now (a dict with a "
                                 "name); got %r and %r" % (history, entry))
    try:
        keep = int(keep)
    except (TypeError, ValueError):
        raise AnsibleFilterError("model_history's keep must be a whole number, got %r" % (keep,))
    return after_switch([dict(item) for item in history if isinstance(item, dict)], dict(entry), keep)


class FilterModule:
    def filters(self):
        return {"model_history": model_history}
