#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ec2_console_output
short_description: Read EC2 instances' console output, waiting until it shows a text
version_added: 0.1.0
description:
  - Reads each instance's console output (GetConsoleOutput, the latest output) and returns it as text. amazon.aws
    has no module for this.
  - With O(wait_for), reads again every O(interval) seconds until every console shows that text, for at most
    O(timeout) seconds, and fails naming the instances whose console does not. A new instance's console is empty
    until it has booted, and cloud-init prints its SSH host keys there at the end of its first boot.
  - Only reads, so it runs in check mode.
author:
  - graviton.llama_rpc developers (@graviton)
extends_documentation_fragment:
  - amazon.aws.common.modules
  - amazon.aws.region.modules
  - amazon.aws.boto3
options:
  instance_ids:
    description: The instances, all in the module's region.
    type: list
    elements: str
    required: true
  wait_for:
    description: A text every console must show (for example C(-----END SSH HOST KEY KEYS-----)); none, no waiting.
    type: str
  timeout:
    description: How long to wait for O(wait_for), in seconds.
    type: int
    default: 600
  interval:
    description: Seconds between two reads of a console that does not show O(wait_for) yet.
    type: int
    default: 10
"""

EXAMPLES = r"""
- name: Read the new instances' consoles once cloud-init has printed their host keys
  graviton.llama_rpc.ec2_console_output:
    region: eu-west-1
    instance_ids: [i-0123456789abcdef0]
    wait_for: "-----END SSH HOST KEY KEYS-----"
  register: consoles
"""

RETURN = r"""
consoles:
  description: Each instance's console output, decoded; an empty string when the instance has none yet.
  returned: success
  type: dict
  sample: {"i-0123456789abcdef0": "... -----BEGIN SSH HOST KEY KEYS----- ..."}
waited:
  description: Seconds spent waiting for O(wait_for).
  returned: always
  type: int
"""

import time

from ansible_collections.amazon.aws.plugins.module_utils.modules import AnsibleAWSModule
from ansible_collections.amazon.aws.plugins.module_utils.retries import AWSRetry

try:
    import botocore
except ImportError:
    pass  # AnsibleAWSModule reports a missing botocore


def read_console(client, instance_id):
    """The console's latest output as text (the API sends it base64-encoded; botocore decodes it)."""
    return client.get_console_output(InstanceId=instance_id, Latest=True, aws_retry=True).get("Output") or ""


def main():
    module = AnsibleAWSModule(
        argument_spec=dict(
            instance_ids=dict(type="list", elements="str", required=True),
            wait_for=dict(type="str"),
            timeout=dict(type="int", default=600),
            interval=dict(type="int", default=10),
        ),
        supports_check_mode=True,
    )
    if not module.region:
        module.fail_json(msg="no region: set region (or AWS_REGION)")
    if module.params["timeout"] < 0 or module.params["interval"] < 1:
        module.fail_json(msg="timeout must be 0 or more seconds and interval 1 or more")
    # Throttling and other transient errors are retried with backoff (amazon.aws's convention).
    client = module.client("ec2", retry_decorator=AWSRetry.jittered_backoff())
    wanted, started = module.params["wait_for"], time.monotonic()
    consoles = {}
    waiting = sorted(set(module.params["instance_ids"]))
    while True:
        for instance_id in waiting:
            try:
                consoles[instance_id] = read_console(client, instance_id)
            except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as error:
                module.fail_json_aws(error, msg="cannot read the console of %s in %s" % (instance_id, module.region))
        waiting = [instance_id for instance_id in waiting if wanted and wanted not in consoles[instance_id]]
        waited = int(time.monotonic() - started)
        if not waiting:
            module.exit_json(changed=False, consoles=consoles, waited=waited)
        if waited + module.params["interval"] > module.params["timeout"]:
            module.fail_json(msg="%r is not in the console of %s in %s after %d s" % (wanted, ", ".join(waiting), module.region, waited),
                             missing=waiting, waited=waited)
        time.sleep(module.params["interval"])


if __name__ == "__main__":
    main()
