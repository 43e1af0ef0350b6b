#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ec2_volume_performance
short_description: Lower gp3 volumes to the performance gp3 includes, and restore what was provisioned
version_added: 0.2.0
description:
  - gp3 includes 3,000 IOPS and 125 MiB/s; what is provisioned beyond is billed per month while the volume exists, its
    instance running or not. With O(state=baseline) each gp3 volume provisioned beyond it is modified down to it and
    tagged with what it had (O(tag), C(<iops>/<MiB/s>)); with O(state=provisioned) a volume so tagged is modified back
    to it, and the tag removed once it has it.
  - A volume can be modified at most four times in a rolling 24 hours, each once the previous modification has
    completed (the ModifyVolume API reference). A volume whose last modification is under way is left as it is; one AWS
    refuses for the limit (C(VolumeModificationRateExceeded)) is reported with AWS's words and the time it can change
    again at the latest, 24 hours after its last modification began (DescribeVolumesModifications shows only the last,
    and AWS's message gives no time). The module does not fail for either.
  - In check mode it says what it would do and changes nothing.
author:
  - graviton.llama_rpc developers (@graviton)
extends_documentation_fragment:
  - amazon.aws.common.modules
  - amazon.aws.region.modules
  - amazon.aws.boto3
  - ansible.builtin.action_common_attributes
  - graviton.llama_rpc.attributes
options:
  volume_ids:
    description: The volumes (a cluster's, found by its instances).
    type: list
    elements: str
    required: true
  state:
    description: V(baseline) lowers what is provisioned beyond gp3's included performance; V(provisioned) restores it.
    type: str
    choices: [baseline, provisioned]
    required: true
  iops:
    description:
      - With O(state=provisioned), the IOPS every volume is given (what provisioning asks for), instead of what its tag
        noted. Set with O(throughput).
    type: int
  throughput:
    description: With O(state=provisioned), the throughput (MiB/s) every volume is given. Set with O(iops).
    type: int
  tag:
    description: The tag that keeps what a lowered volume had.
    type: str
    default: graviton.llama_rpc/provisioned
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Lower the stopped cluster's volumes to gp3's baseline
  graviton.llama_rpc.ec2_volume_performance:
    region: eu-west-1
    volume_ids: "{{ volumes.volumes | map(attribute='id') | list }}"
    state: baseline
  register: lowered
"""

RETURN = r"""
volumes:
  description:
    - Per volume C(volume_id), C(action) (V(lowered), V(restored), V(blocked), V(none)), C(iops) and C(throughput) as
      it is now (or will be, in check mode), C(reason) (why nothing was done) and C(from) (by when, at the latest, a
      volume at AWS's limit can be modified again, ISO 8601, or null).
  returned: always
  type: list
  elements: dict
"""

import datetime

from ansible_collections.amazon.aws.plugins.module_utils.modules import AnsibleAWSModule
from ansible_collections.amazon.aws.plugins.module_utils.retries import AWSRetry

from ansible_collections.graviton.llama_rpc.plugins.module_utils.aws import volume_performance

try:
    import botocore
except ImportError:
    pass  # AnsibleAWSModule reports a missing botocore

DONE = {"lower": "lowered", "restore": "restored"}


def main():
    module = AnsibleAWSModule(
        argument_spec=dict(
            volume_ids=dict(type="list", elements="str", required=True),
            state=dict(type="str", choices=["baseline", "provisioned"], required=True),
            tag=dict(type="str", default=volume_performance.TAG),
            iops=dict(type="int"),
            throughput=dict(type="int"),
        ),
        required_together=[("iops", "throughput")],
        supports_check_mode=True,
    )
    params = module.params
    client = module.client("ec2", retry_decorator=AWSRetry.jittered_backoff())
    ids = sorted(set(params["volume_ids"]))
    result = {"changed": False, "volumes": []}
    if not ids:
        module.exit_json(**result)
    try:
        volumes = client.describe_volumes(VolumeIds=ids, aws_retry=True)["Volumes"]
        modifications = client.describe_volumes_modifications(VolumeIds=ids, aws_retry=True)["VolumesModifications"]
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as error:
        module.fail_json_aws(error, msg="cannot read the volumes %s" % ", ".join(ids))
    now = datetime.datetime.now(datetime.timezone.utc)
    for volume in sorted(volumes, key=lambda item: item["VolumeId"]):
        vid = volume["VolumeId"]
        mine = [item for item in modifications if item.get("VolumeId") == vid]
        decision = volume_performance.decide(volume, mine,
                                             params["state"], now, params["tag"],
                                             asked=(params["iops"], params["throughput"]) if params["iops"] else None)
        entry = {"volume_id": vid, "action": DONE.get(decision["action"], decision["action"]),
                 "iops": volume.get("Iops"), "throughput": volume.get("Throughput"), "reason": decision["reason"],
                 "from": decision["from"].isoformat() if decision["from"] else None}
        if decision["action"] in DONE:
            iops, throughput = decision["target"]
            entry.update(iops=iops, throughput=throughput)
            result["changed"] = True
            if not module.check_mode:
                try:
                    if decision["action"] == "lower":  # what it had, before it is lowered
                        had = "%d/%d" % (volume.get("Iops") or volume_performance.BASELINE_IOPS,
                                         volume.get("Throughput") or volume_performance.BASELINE_MIB_S)
                        client.create_tags(Resources=[vid], aws_retry=True, Tags=[{"Key": params["tag"], "Value": had}])
                    client.modify_volume(VolumeId=vid, Iops=iops, Throughput=throughput, aws_retry=True)
                    if decision["action"] == "restore" and volume_performance.parse_tag(
                            {item["Key"]: item["Value"] for item in volume.get("Tags") or []}.get(params["tag"])):
                        client.delete_tags(Resources=[vid], Tags=[{"Key": params["tag"]}], aws_retry=True)
                except botocore.exceptions.ClientError as error:
                    # AWS's own limits (a fifth modification in a day; one under way, begun since our look): reported,
                    # not failed
                    code = error.response.get("Error", {}).get("Code", "")
                    if "Modification" not in code:
                        module.fail_json_aws(error, msg="cannot modify %s" % vid)
                    said = error.response["Error"].get("Message", "AWS refused the modification")
                    reason, free_at = (volume_performance.refused_for_rate(mine, said, now)
                                       if code == volume_performance.RATE_EXCEEDED else ("%s: %s" % (code, said), None))
                    entry.update(action="blocked", iops=volume.get("Iops"), throughput=volume.get("Throughput"),
                                 reason=reason, **{"from": free_at.isoformat() if free_at else None})
        result["volumes"].append(entry)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
