#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ec2_instance_type_check
short_description: Check that EC2 instance types are offered in a region, and their CPU architecture
version_added: 0.1.0
description:
  - For each instance type, whether the region offers it (DescribeInstanceTypeOfferings) and which CPU
    architectures it supports (DescribeInstanceTypes), with vCPUs and memory. amazon.aws has no module for this.
  - With O(architecture), fails, naming each type that is not offered or not of that architecture.
  - Only reads, so it runs in check mode.
author:
  - graviton.llama_rpc developers (@graviton)
extends_documentation_fragment:
  - amazon.aws.common.modules
  - amazon.aws.region.modules
  - amazon.aws.boto3
options:
  instance_types:
    description: The instance types, for example V(c8g.4xlarge).
    type: list
    elements: str
    required: true
  architecture:
    description: Fail unless every type supports this architecture (V(arm64) for Graviton).
    type: str
"""

EXAMPLES = r"""
- name: Check that the region offers Graviton c8g
  graviton.llama_rpc.ec2_instance_type_check:
    region: eu-west-1
    instance_types: [c8g.4xlarge]
    architecture: arm64
"""

RETURN = r"""
instance_types:
  description: Per type, whether it is offered, its architectures, vCPUs and memory (MiB).
  returned: always
  type: dict
  sample: {"c8g.4xlarge": {"offered": true, "architectures": ["arm64"], "vcpus": 16, "memory_mib": 32768}}
"""

from ansible_collections.amazon.aws.plugins.module_utils.modules import AnsibleAWSModule
from ansible_collections.amazon.aws.plugins.module_utils.retries import AWSRetry

try:
    import botocore
except ImportError:
    pass  # AnsibleAWSModule reports a missing botocore


def main():
    module = AnsibleAWSModule(
        argument_spec=dict(
            instance_types=dict(type="list", elements="str", required=True),
            architecture=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    region = module.region
    if not region:
        module.fail_json(msg="no region: set region (or AWS_REGION)")
    # Throttling and other transient errors are retried with backoff (amazon.aws's convention).
    client = module.client("ec2", retry_decorator=AWSRetry.jittered_backoff())
    types = sorted(set(module.params["instance_types"]))
    try:
        offered = {offer["InstanceType"] for offer in client.describe_instance_type_offerings(
            LocationType="region", Filters=[{"Name": "instance-type", "Values": types}], aws_retry=True)["InstanceTypeOfferings"]}
        described = {}
        if offered:
            for item in client.describe_instance_types(InstanceTypes=sorted(offered), aws_retry=True)["InstanceTypes"]:
                described[item["InstanceType"]] = item
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as error:
        module.fail_json_aws(error, msg="cannot read the instance types of %s" % region)
    result = {}
    for name in types:
        item = described.get(name, {})
        result[name] = {"offered": name in offered,
                        "architectures": item.get("ProcessorInfo", {}).get("SupportedArchitectures", []),
                        "vcpus": item.get("VCpuInfo", {}).get("DefaultVCpus"),
                        "memory_mib": item.get("MemoryInfo", {}).get("SizeInMiB")}
    problems = ["%s is not offered in %s (choose a region that offers it, or another instance type)" % (name, region)
                for name in types if not result[name]["offered"]]
    wanted = module.params["architecture"]
    if wanted:
        problems += ["%s is %s, not %s (Graviton types have a g after the generation: c8g, m8g, r8g)"
                     % (name, "/".join(info["architectures"]), wanted)
                     for name, info in result.items() if info["offered"] and wanted not in info["architectures"]]
    if problems:
        module.fail_json(msg="; ".join(problems), instance_types=result)
    module.exit_json(changed=False, instance_types=result)


if __name__ == "__main__":
    main()
