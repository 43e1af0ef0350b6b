"""The decisions of a stop's and a start's volume modifications: lower to gp3's baseline and note what was there,
restore it, never one over a modification still under way, and AWS's refusal of a fifth in 24 hours bounded in time."""

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


def test_a_modification_under_way_blocks_the_next_and_a_count_is_not_read_ahead():
    optimizing = vp.decide(volume(3000, 125, tag="4000/1000"), [done(0.5, "optimizing")], "provisioned", NOW)
    assert optimizing["action"] == "blocked" and "is still optimizing" in optimizing["reason"] and not optimizing["from"]
    # AWS shows only the last modification: whatever history moto keeps, a count is AWS's to make (its refusal)
    assert vp.decide(volume(), [done(hours) for hours in (1, 5, 9, 20)], "baseline", NOW)["action"] == "lower"


def test_a_refusal_for_the_rate_is_free_24_hours_after_the_last_modification_began_at_the_latest():
    reason, free_at = vp.refused_for_rate([done(3)], "You've reached the maximum modification rate", NOW)
    assert free_at == NOW - datetime.timedelta(hours=3) + datetime.timedelta(hours=24)
    assert reason == ("AWS refused a fifth modification in its rolling 24 hours (VolumeModificationRateExceeded: "
                      "You've reached the maximum modification rate); the last one began 2026-12-05 09:00 UTC")
    assert vp.refused_for_rate([], "no", NOW)[1] == NOW + datetime.timedelta(hours=24), "none shown: a day from now"
