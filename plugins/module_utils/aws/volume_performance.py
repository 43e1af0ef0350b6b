# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stopped cluster's gp3 volumes at the baseline gp3 includes, and what was provisioned restored at its start.

gp3 includes 3,000 IOPS and 125 MiB/s; what is provisioned beyond is billed per month while the volume exists, whether
its instance runs or not (https://aws.amazon.com/ebs/pricing/). Only a load needs it, so a stop may lower a volume to
the baseline (noting what it had in a tag on the volume) and a start raise it again. ModifyVolume allows a volume up to
four modifications in a rolling 24 hours, each once the previous one has completed
(https://docs.aws.amazon.com/cli/latest/reference/ec2/modify-volume.html). DescribeVolumesModifications answers only a
volume's most recent modification, so the count cannot be read ahead: a modification under way is seen (and the
volume left as it is), a fifth in the day is AWS's refusal (VolumeModificationRateExceeded, whose message gives no
time), and the time it can change again is bounded from the last modification's start.

Only decisions live here (unit-tested); the module ec2_volume_performance acts on them.
"""

from __future__ import annotations

import datetime

from ansible_collections.graviton.llama_rpc.plugins.module_utils.aws.cluster_bill import (
    GP3_INCLUDED_IOPS as BASELINE_IOPS, GP3_INCLUDED_MIB_S as BASELINE_MIB_S, PROVISIONED_TAG as TAG,
    provisioned_from_tag as parse_tag)

WINDOW = datetime.timedelta(hours=24)
RATE_EXCEEDED = "VolumeModificationRateExceeded"  # ModifyVolume's refusal of a fifth modification in the window


def blocked(modifications, now):
    """Why a volume cannot be modified now, and from when it can (None, None when it can): its last modification still
    under way. modifications: DescribeVolumesModifications' entries for the volume (AWS gives only the last)."""
    under_way = [item for item in modifications if item.get("ModificationState") in ("modifying", "optimizing")]
    if under_way:
        return ("its last modification (started %s) is still %s; a volume is modified again once that has completed"
                % (under_way[0]["StartTime"].strftime("%Y-%m-%d %H:%M UTC"), under_way[0]["ModificationState"]), None)
    return None, None


def refused_for_rate(modifications, message, now):
    """(reason, from) of a volume whose ModifyVolume AWS refused with RATE_EXCEEDED: the four modifications of its
    rolling 24 hours all began no later than the last one DescribeVolumesModifications shows, so it can change again
    24 hours after that one began at the latest (24 hours from now when none is shown)."""
    starts = [item["StartTime"] for item in modifications if item.get("StartTime")]
    last = max(starts) if starts else None
    return ("AWS refused a fifth modification in its rolling 24 hours (%s: %s)%s" % (
        RATE_EXCEEDED, message, "; the last one began %s" % last.strftime("%Y-%m-%d %H:%M UTC") if last else ""),
        (last or now) + WINDOW)


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
