# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: llama_server_busy
short_description: How many requests llama-server has in flight, from its /metrics
version_added: 0.2.0
description:
  - Parses llama-server's C(/metrics) text (Prometheus's format, C(--metrics)) and returns the requests it is
    processing plus those waiting for a free slot (C(llamacpp:requests_processing) and C(llamacpp:requests_deferred)).
  - Text without those series (an empty answer, a server loading its model) gives 0. Text that is not the format fails,
    naming the line.
options:
  _input:
    description: The text of C(/metrics).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Wait until llama-server has no request in flight
  ansible.builtin.uri:
    url: "http://10.0.1.10:8080/metrics"
    headers:
      Authorization: "Bearer {{ api_key }}"
    return_content: true
  register: metrics
  until: metrics.content | graviton.llama_rpc.llama_server_busy == 0
  retries: 60
  delay: 1
  no_log: true
"""

RETURN = r"""
_value:
  description: Requests in progress or deferred.
  type: int
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp.server_metrics import MetricsError, busy


def llama_server_busy(text):
    if not isinstance(text, str):
        raise AnsibleFilterError("llama_server_busy expects the text of llama-server's /metrics, got %r" % (text,))
    try:
        return busy(text)
    except MetricsError as error:
        raise AnsibleFilterError("llama_server_busy: %s" % error)


class FilterModule:
    def filters(self):
        return {"llama_server_busy": llama_server_busy}
