"""The decisions of a stop's and a start's volume modifications: lower to gp3's baseline and note what was there,
restore it, and never a fifth modification in 24 hours or one over a modification still under way."""

import datetime

from ansible_collections.graviton.llama_rpc.plugins.module_utils.aws import volume_performance as vp

NOW = datetime.datetime(2026, 12, 5, 12, 0, tzinfo=datetime.timezone.utc)


def volume(iops=4000, throughput=1000, tag=None, kind="gp3"):
    return {"VolumeId": "vol-1", "VolumeType": kind, "Iops": iops, "Throughput": throughput,
            "Tags": [{"Key": vp.TAG, "Value": tag}] if tag else []}


def done(hours_ago, state="completed"):
    return {"ModificationState": state, "StartTime": NOW - datetime.timedelta(hours=hours_ago)}


def test_a_provisioned_volume_is_lowered_and_one_at_the_baseline_left():
    assert vp.decide(volume(), [], "baseline", NOW) == {"action": "lower", "target": (3000, 125), "reason": "", "from": None}
    assert vp.decide(volume(3000, 125), [], "baseline", NOW)["action"] == "none"
    assert vp.decide(volume(kind="gp2"), [], "baseline", NOW)["reason"] == "not gp3"


def test_what_the_tag_noted_is_restored_once():
    lowered = volume(3000, 125, tag="4000/1000")
    assert vp.decide(lowered, [done(30)], "provisioned", NOW)["target"] == (4000, 1000)
    assert vp.decide(lowered, [done(30)], "provisioned", NOW)["action"] == "restore"
    assert vp.decide(volume(4000, 1000, tag="4000/1000"), [], "provisioned", NOW)["action"] == "none"
    assert vp.decide(volume(3000, 125), [], "provisioned", NOW)["reason"] == "nothing lowered to restore"
    assert vp.decide(volume(3000, 125, tag="lots/fast"), [], "provisioned", NOW)["action"] == "none"


def test_a_modification_under_way_or_four_in_a_day_block_the_next():
    optimizing = vp.decide(volume(3000, 125, tag="4000/1000"), [done(0.5, "optimizing")], "provisioned", NOW)
    assert optimizing["action"] == "blocked" and "is still optimizing" in optimizing["reason"]
    four = [done(hours) for hours in (1, 5, 9, 20)]
    busy = vp.decide(volume(), four, "baseline", NOW)
    assert busy["action"] == "blocked" and "modified 4 times in the last 24 hours" in busy["reason"]
    assert busy["from"] == NOW - datetime.timedelta(hours=20) + datetime.timedelta(hours=24)
    # the oldest of four fell out of the window: one more is allowed
    assert vp.decide(volume(), [done(hours) for hours in (1, 5, 9, 25)], "baseline", NOW)["action"] == "lower"
