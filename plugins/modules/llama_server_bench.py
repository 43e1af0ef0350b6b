#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_server_bench
short_description: Measure llama-server under 1, 2, 4, ... concurrent streaming clients
version_added: 0.1.0
description:
  - For each number of clients in O(clients), that many clients each send O(requests_per_client) streaming chat
    completions (C(/v1/chat/completions), OpenAI's API) one after another, each asking for exactly O(max_tokens) tokens
    (C(ignore_eos)), each with its own prompt. It reports the aggregate generation rate (every completion token of the
    level over the level's wall time), the time to the first token and the whole request's latency (p50, p95).
  - One request first, not measured, so that no level pays the server's first-request costs.
  - Needs only Python's standard library on the host that runs it. Load tools that parse a streamed response (to time
    the first token) come with large dependencies (guidellm, llmperf, genai-perf); those that do not (ab, wrk, hey)
    cannot time it.
author:
  - graviton.llama_rpc developers (@graviton)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - graviton.llama_rpc.attributes
options:
  url:
    description: llama-server's base URL (C(http://10.0.1.10:8080)); C(https) works too.
    type: str
    required: true
  api_key:
    description: The key llama-server asks for, sent as C(Authorization) C(Bearer). Never logged.
    type: str
    default: ""
  clients:
    description: The numbers of concurrent clients to measure, one level each, in this order.
    type: list
    elements: int
    default: [1, 2, 4, 8]
  requests_per_client:
    description: The requests each client sends, one after another, at each level.
    type: int
    default: 2
  max_tokens:
    description: The tokens each request generates.
    type: int
    default: 32
  prompt:
    description: The prompt; each request adds its own number, so that no request reuses another's cached prompt.
    type: str
    default: Write a short story about a lighthouse keeper who finds a message in a bottle.
  timeout:
    description: Seconds a request may wait for the next bytes of its answer before it counts as failed.
    type: float
    default: 300
attributes:
  check_mode:
    support: none
"""

EXAMPLES = r"""
- name: Measure llama-server with 1, 2, 4 and 8 clients
  graviton.llama_rpc.llama_server_bench:
    url: http://10.0.1.10:8080
    api_key: "{{ rpc_master_server_api_key }}"
    clients: [1, 2, 4, 8]
  register: concurrency
"""

RETURN = r"""
levels:
  description: One entry per number of clients.
  returned: success
  type: list
  elements: dict
  contains:
    clients:
      description: Concurrent clients.
      type: int
    requests:
      description: Requests sent.
      type: int
    failed:
      description: Requests that ended without their tokens (an HTTP error, a closed stream, a timeout).
      type: int
    errors:
      description: The first few failures' reasons.
      type: list
      elements: str
    completion_tokens:
      description: Tokens generated over all requests (the server's own count).
      type: int
    seconds:
      description: Wall time from the first request's start to the last one's end.
      type: float
    tokens_per_second:
      description: RV(levels.completion_tokens) over RV(levels.seconds).
      type: float
    ttft_ms_p50:
      description: Median time to the first generated token (ms).
      type: float
    ttft_ms_p95:
      description: 95th percentile of the time to the first generated token (ms).
      type: float
    latency_ms_p50:
      description: Median time of a whole request (ms).
      type: float
    latency_ms_p95:
      description: 95th percentile of the time of a whole request (ms).
      type: float
"""

import http.client
import json
import math
import threading
import time
from urllib.parse import urlsplit

from ansible.module_utils.basic import AnsibleModule


class RequestFailed(Exception):
    """The request ended without its tokens."""


def percentile(values, fraction):
    """Nearest-rank percentile (the value at rank ceil(fraction x n)); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def stream_completion(url, api_key, prompt, max_tokens, timeout):
    """One streaming chat completion: (seconds to the first token, seconds in all, completion tokens)."""
    parts = urlsplit(url)
    connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = connection_class(parts.hostname, parts.port, timeout=timeout)
    body = json.dumps({
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0,
        "stream": True, "stream_options": {"include_usage": True},
    })
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + api_key}
    started = time.monotonic()
    first_token = None
    tokens = None
    try:
        connection.request("POST", (parts.path.rstrip("/") or "") + "/v1/chat/completions", body, headers)
        response = connection.getresponse()
        if response.status != 200:
            raise RequestFailed("HTTP %d: %s" % (response.status, response.read(300).decode("utf-8", "replace")))
        for line in response:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            chunk = json.loads(data)
            if first_token is None and any((choice.get("delta") or {}).get("content") for choice in chunk.get("choices", [])):
                first_token = time.monotonic() - started
            if chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
    except (OSError, http.client.HTTPException, ValueError) as error:
        raise RequestFailed("%s: %s" % (type(error).__name__, error))
    finally:
        connection.close()
    if tokens is None:
        raise RequestFailed("the stream ended without its usage (closed early)")
    return first_token, time.monotonic() - started, tokens


def run_level(clients, requests_per_client, url, api_key, prompt, max_tokens, timeout):
    records, lock = [], threading.Lock()

    def client(index):
        for request in range(requests_per_client):
            started = time.monotonic()
            text = "%s (level %d, client %d, request %d)" % (prompt, clients, index + 1, request + 1)
            try:
                record = dict(zip(("ttft", "latency", "tokens"), stream_completion(url, api_key, text, max_tokens, timeout)))
            except RequestFailed as error:
                record = {"error": "client %d, request %d: %s" % (index + 1, request + 1, error)}
            record.update(started=started, ended=time.monotonic())
            with lock:
                records.append(record)

    threads = [threading.Thread(target=client, args=(index,)) for index in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done = [record for record in records if "error" not in record]
    seconds = max(record["ended"] for record in records) - min(record["started"] for record in records)
    tokens = sum(record["tokens"] for record in done)

    def milliseconds(key, fraction):
        value = percentile([record[key] for record in done if record[key] is not None], fraction)
        return None if value is None else round(value * 1000, 1)

    return {
        "clients": clients, "requests": len(records), "failed": len(records) - len(done),
        "errors": [record["error"] for record in records if "error" in record][:5],
        "completion_tokens": tokens, "seconds": round(seconds, 3),
        "tokens_per_second": round(tokens / seconds, 2) if seconds > 0 else 0.0,
        "ttft_ms_p50": milliseconds("ttft", 0.5), "ttft_ms_p95": milliseconds("ttft", 0.95),
        "latency_ms_p50": milliseconds("latency", 0.5), "latency_ms_p95": milliseconds("latency", 0.95),
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            api_key=dict(type="str", default="", no_log=True),
            clients=dict(type="list", elements="int", default=[1, 2, 4, 8]),
            requests_per_client=dict(type="int", default=2),
            max_tokens=dict(type="int", default=32, no_log=False),
            prompt=dict(type="str", default="Write a short story about a lighthouse keeper who finds a message in a bottle."),
            timeout=dict(type="float", default=300),
        ),
        supports_check_mode=False,
    )
    params = module.params
    problems = []
    if urlsplit(params["url"]).scheme not in ("http", "https") or not urlsplit(params["url"]).hostname:
        problems.append("url must be http://HOST:PORT or https://HOST:PORT (got %r)" % params["url"])
    if not params["clients"] or min(params["clients"]) < 1:
        problems.append("clients must list numbers of 1 or more (got %r)" % params["clients"])
    for name in ("requests_per_client", "max_tokens"):
        if params[name] < 1:
            problems.append("%s must be 1 or more (got %r)" % (name, params[name]))
    if params["timeout"] <= 0:
        problems.append("timeout must be above 0 (got %r)" % params["timeout"])
    if problems:
        module.fail_json(msg="; ".join(problems))
    arguments = (params["url"], params["api_key"], params["prompt"], params["max_tokens"], params["timeout"])
    try:
        stream_completion(arguments[0], arguments[1], "%s (warm-up)" % params["prompt"], *arguments[3:])
    except RequestFailed as error:
        module.fail_json(msg="llama-server at %s did not answer a first request: %s" % (params["url"], error))
    levels = [run_level(clients, params["requests_per_client"], *arguments) for clients in params["clients"]]
    module.exit_json(changed=False, levels=levels)


if __name__ == "__main__":
    main()
