# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: staging_sends
short_description: What the master sends each RPC worker's tensor cache before a first load
version_added: 0.1.0
description:
  - Takes what each worker's cache must hold (the fact C(rpc_master_cache_request), per endpoint the tensors of its
    share) and what each worker's cache check found (the facts C(rpc_worker_cache), merged), and gives the tensors to
    send each worker, which is what its check found missing. A report counts only for the share it checked.
options:
  _input:
    description: Endpoint -> the tensors its cache must hold (each C(hash) and C(size)).
    type: dict
    required: true
  reports:
    description: Endpoint -> the worker's check (C(checked), C(missing), C(fits), C(free_bytes), C(needed_bytes)).
    type: dict
    default: {}
  everything:
    description: The caches are known empty (a benchmark emptied them), so every share is sent whole.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: What to send each worker
  ansible.builtin.set_fact:
    staging: "{{ rpc_master_cache_request | graviton.llama_rpc.staging_sends(reports) }}"
"""

RETURN = r"""
_value:
  description: C(sends) (each C(endpoint), C(hashes)), C(unchecked) (endpoints whose share no check of this request
    covers, where nothing is sent), C(short) (each C(endpoint), C(free_bytes), C(needed_bytes) of a cache too small).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp.tensor_cache import staging_sends as _staging_sends


def staging_sends(request, reports=None, everything=False):
    if not isinstance(request, dict):
        raise AnsibleFilterError("staging_sends needs rpc_master_cache_request (endpoint -> tensors); got %r" % (request,))
    return _staging_sends(request, reports or {}, everything)


class FilterModule:
    def filters(self):
        return {"staging_sends": staging_sends}
