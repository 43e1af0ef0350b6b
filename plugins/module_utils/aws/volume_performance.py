# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stopped cluster's gp3 volumes at the baseline gp3 includes, and what was provisioned restored at its start.

gp3 includes 3,000 IOPS and 125 MiB/s; what is provisioned beyond is billed per month while the volume exists, whether
its instance runs or not (https://aws.amazon.com/ebs/pricing/). Only a load needs it, so a stop may lower a volume to
the baseline (noting what it had in a tag on the volume) and a start raise it again. ModifyVolume allows a volume up to
four modifications in a rolling 24 hours, each once the previous one has completed
(https://docs.aws.amazon.com/cli/latest/reference/ec2/modify-volume.html): a volume that cannot be modified now is left
as it is, and the reason and the time it can be are said.

Only decisions live here (unit-tested); the module ec2_volume_performance acts on them.
"""

from __future__ import annotations

import datetime

from ansible_collections.graviton.llama_rpc.plugins.module_utils.aws.cluster_bill import (
    GP3_INCLUDED_IOPS as BASELINE_IOPS, GP3_INCLUDED_MIB_S as BASELINE_MIB_S, PROVISIONED_TAG as TAG,
    provisioned_from_tag as parse_tag)

MAX_MODIFICATIONS, WINDOW = 4, datetime.timedelta(hours=24)


def blocked(modifications, now):
    """Why a volume cannot be modified now, and from when it can (None, None when it can): its last modification still
    under way, or four in the last 24 hours. modifications: DescribeVolumesModifications' entries for the volume."""
    under_way = [item for item in modifications if item.get("ModificationState") in ("modifying", "optimizing")]
    if under_way:
        return ("its last modification (started %s) is still %s; a volume is modified again once that has completed"
                % (under_way[0]["StartTime"].strftime("%Y-%m-%d %H:%M UTC"), under_way[0]["ModificationState"]), None)
    recent = sorted(item["StartTime"] for item in modifications
                    if item.get("StartTime") and now - item["StartTime"] < WINDOW)
    if len(recent) >= MAX_MODIFICATIONS:
        free_at = recent[-MAX_MODIFICATIONS] + WINDOW
        return ("it was modified %d times in the last 24 hours, AWS's limit" % len(recent), free_at)
    return None, None


def decide(volume, modifications, state, now, tag=TAG, asked=None):
    """What to do with one volume (DescribeVolumes' entry): {"action": "lower", "restore", "none" or "blocked",
    "target": (iops, MiB/s) or None, "reason": text, "from": when a blocked volume can be modified}. state "baseline"
    lowers to gp3's baseline; "provisioned" restores what the tag noted, or gives `asked` (iops, MiB/s) when set (what
    provisioning asks for: a volume made or changed since)."""
    tags = {item["Key"]: item["Value"] for item in volume.get("Tags") or []}
    iops, throughput = volume.get("Iops") or BASELINE_IOPS, volume.get("Throughput") or BASELINE_MIB_S
    if volume.get("VolumeType") != "gp3":
        return {"action": "none", "target": None, "reason": "not gp3", "from": None}
    if state == "baseline":
        if iops <= BASELINE_IOPS and throughput <= BASELINE_MIB_S:
            return {"action": "none", "target": None, "reason": "at the baseline already", "from": None}
        target, action = (BASELINE_IOPS, BASELINE_MIB_S), "lower"
    else:
        had = tuple(asked) if asked else parse_tag(tags.get(tag))
        if had is None:
            return {"action": "none", "target": None, "reason": "nothing lowered to restore", "from": None}
        if (iops, throughput) == had:
            return {"action": "none", "target": had, "reason": "as asked already" if asked else "restored already",
                    "from": None}
        target, action = had, "restore"
    why, free_at = blocked(modifications, now)
    if why:
        return {"action": "blocked", "target": target, "reason": why, "from": free_at}
    return {"action": action, "target": target, "reason": "", "from": None}
