#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rpc_probe
short_description: Check llama.cpp RPC workers by speaking their protocol
version_added: 0.1.0
description:
  - Connects to each llama.cpp RPC worker (C(ggml-rpc-server)), says HELLO, asks for its devices and
    their free and total memory, and reports per worker whether it is usable.
  - States are V(ok); V(refused) (nothing listens, or a firewall rejects); V(timeout) (no answer in time,
    what a worker busy with another client looks like, since a worker serves one connection at a time,
    or a firewall that drops); V(unreachable) (no route, or the name does not resolve);
    V(wrong_protocol) (it answers, but not with an RPC protocol this master can use); V(error).
  - Workers are probed in parallel, each within O(timeout). It only reads, so it runs in check mode.
  - Replaces the manual C(telnet host 50052) check.
author:
  - graviton.llama_rpc developers (@graviton)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - graviton.llama_rpc.attributes
  - graviton.llama_rpc.rpc_workers
options:
  timeout:
    description: Seconds to wait for each worker (connection and every answer).
    type: float
    default: 5.0
  protocol_version:
    description:
      - The RPC protocol version of the master that will use the workers (for example V(7.0.0), from the
        llama_build record). A worker is usable when its major version is the same and its minor is not
        newer; others are reported as V(wrong_protocol).
    type: str
  fail_unless_all_ok:
    description: Fail, naming each worker that is not V(ok) and why, instead of only reporting.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
notes:
  - A worker writes to its sockets without handling SIGPIPE. When this probe gives up on a busy worker,
    the worker later answers a connection that is gone; under systemd (which ignores SIGPIPE for
    services) that is harmless, but a worker started by hand in a shell may die of it.
"""

EXAMPLES = r"""
- name: Check the workers before loading a model
  graviton.llama_rpc.rpc_probe:
    workers: [10.0.1.11:50052, 10.0.1.12:50052]
    protocol_version: 7.0.0
    fail_unless_all_ok: true
  register: probe

- name: Show the free memory per worker
  ansible.builtin.debug:
    msg: "{{ probe.workers | items2dict(key_name='endpoint', value_name='free_total') }}"
"""

RETURN = r"""
all_ok:
  description: Whether every worker is V(ok).
  returned: always
  type: bool
  sample: true
counts:
  description: How many workers are in each state.
  returned: always
  type: dict
  sample: {"ok": 2}
workers:
  description: One entry per worker, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    endpoint:
      description: The worker as given.
      type: str
      sample: 10.0.1.11:50052
    state:
      description: V(ok), V(refused), V(timeout), V(unreachable), V(wrong_protocol) or V(error).
      type: str
      sample: ok
    message:
      description: What was found, in words.
      type: str
      sample: RPC protocol 7.0.0, 1 device(s)
    protocol:
      description: The worker's RPC protocol version, once it answered HELLO.
      type: str
      sample: 7.0.0
    compatible:
      description: Whether the protocol suits O(protocol_version); null without it.
      type: bool
      sample: true
    devices:
      description: The worker's devices, with free and total memory in bytes.
      type: list
      elements: dict
      sample: [{"index": 0, "free": 32212254720, "total": 33285996544}]
    free_total:
      description: Free bytes over all the worker's devices.
      type: int
      sample: 32212254720
    elapsed_ms:
      description: How long the probe of this worker took.
      type: int
      sample: 3
"""

from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.graviton.llama_rpc.plugins.module_utils.llama_cpp.rpc_protocol import MAX_WORKERS, OK, parse_endpoint, probe


def main():
    module = AnsibleModule(
        argument_spec=dict(
            workers=dict(type="list", elements="str", required=True),
            timeout=dict(type="float", default=5.0),
            protocol_version=dict(type="str"),
            fail_unless_all_ok=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    workers = module.params["workers"]
    if not 1 <= len(workers) <= MAX_WORKERS:
        module.fail_json(msg="workers has %d entries; llama.cpp uses 1 to %d RPC workers" % (len(workers), MAX_WORKERS))
    bad = []
    for endpoint in workers:
        try:
            parse_endpoint(endpoint)
        except ValueError as error:
            bad.append(str(error))
    if bad:
        module.fail_json(msg="workers: " + "; ".join(bad))
    if module.params["timeout"] <= 0:
        module.fail_json(msg="timeout must be more than 0 seconds, got %s" % module.params["timeout"])
    version = module.params["protocol_version"]
    if version is not None and not all(part.isdigit() for part in version.split(".")):
        module.fail_json(msg="protocol_version must look like 7.0.0, got %r" % version)

    with ThreadPoolExecutor(max_workers=len(workers)) as pool:
        results = list(pool.map(lambda endpoint: probe(endpoint, module.params["timeout"], version), workers))
    counts = {}
    for result in results:
        counts[result["state"]] = counts.get(result["state"], 0) + 1
    all_ok = counts.get(OK, 0) == len(results)
    outcome = dict(changed=False, workers=results, counts=counts, all_ok=all_ok)
    if module.params["fail_unless_all_ok"] and not all_ok:
        problems = ["%s: %s (%s)" % (r["endpoint"], r["state"], r["message"]) for r in results if r["state"] != OK]
        module.fail_json(msg="%d of %d RPC workers are not usable: %s" % (len(problems), len(results), "; ".join(problems)), **outcome)
    module.exit_json(**outcome)


if __name__ == "__main__":
    main()
