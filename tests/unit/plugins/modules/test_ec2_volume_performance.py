"""ec2_volume_performance against moto in-process: a stop lowers a provisioned gp3 volume to the baseline and notes
what it had, a start restores it and drops the note, a volume at the baseline is left alone, check mode changes nothing,
and a fifth modification within 24 hours, refused by a moto that answers as AWS does, is reported with the time it can
be made, not failed."""

import datetime

import pytest

moto = pytest.importorskip("moto")  # the lowest ansible-core's venv has no moto

# pylint: disable=wrong-import-position
import boto3  # noqa: E402

from ansible_collections.graviton.llama_rpc.plugins.modules import ec2_volume_performance as module  # noqa: E402

from tests.tools import moto_aws  # noqa: E402
from tests.unit.plugins.module_runner import run_module  # noqa: E402

REGION = "eu-west-1"


@pytest.fixture(name="ec2")
def fixture_ec2():
    with pytest.MonkeyPatch.context() as patch, moto.mock_aws():
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        moto_aws.volume_modifications_as_aws(patch.setattr)  # the last modification only, and the fifth refused
        yield boto3.client("ec2", region_name=REGION)


def make(ec2, iops, throughput):
    return ec2.create_volume(Size=100, AvailabilityZone=REGION + "a", VolumeType="gp3", Iops=iops,
                             Throughput=throughput)["VolumeId"]


def described(ec2, vid):
    volume = ec2.describe_volumes(VolumeIds=[vid])["Volumes"][0]
    return volume["Iops"], volume["Throughput"], {tag["Key"]: tag["Value"] for tag in volume.get("Tags") or []}


def test_a_stop_lowers_a_start_restores_and_a_baseline_volume_is_left(ec2, capsys):
    fast, plain = make(ec2, 4000, 1000), make(ec2, 3000, 125)
    checked = run_module(module.main, capsys, region=REGION, volume_ids=[fast, plain], state="baseline",
                         _ansible_check_mode=True)
    assert checked["changed"] and described(ec2, fast)[:2] == (4000, 1000), "check mode modified a volume"
    lowered = run_module(module.main, capsys, region=REGION, volume_ids=[fast, plain], state="baseline")
    actions = {entry["volume_id"]: entry["action"] for entry in lowered["volumes"]}
    assert lowered["changed"] and actions == {fast: "lowered", plain: "none"}
    assert described(ec2, fast) == (3000, 125, {"graviton.llama_rpc/provisioned": "4000/1000"})
    again = run_module(module.main, capsys, region=REGION, volume_ids=[fast, plain], state="baseline")
    assert not again["changed"]
    restored = run_module(module.main, capsys, region=REGION, volume_ids=[fast, plain], state="provisioned")
    assert restored["changed"] and {entry["volume_id"]: entry["action"] for entry in restored["volumes"]} == {
        fast: "restored", plain: "none"}
    assert described(ec2, fast) == (4000, 1000, {})
    assert not run_module(module.main, capsys, region=REGION, volume_ids=[fast], state="provisioned")["changed"]


def test_a_fifth_modification_in_a_day_is_refused_by_aws_and_reported_with_its_time(ec2, capsys):
    vid = make(ec2, 4000, 1000)
    for step in range(4):  # two stops and two starts: AWS's limit for the day
        state = "baseline" if step % 2 == 0 else "provisioned"
        assert run_module(module.main, capsys, region=REGION, volume_ids=[vid], state=state)["changed"]
    [last] = ec2.describe_volumes_modifications(VolumeIds=[vid])["VolumesModifications"]
    fifth = run_module(module.main, capsys, region=REGION, volume_ids=[vid], state="baseline")
    [entry] = fifth["volumes"]
    assert not fifth.get("failed") and entry["action"] == "blocked", fifth
    assert entry["reason"].startswith("AWS refused a fifth modification in its rolling 24 hours "
                                      "(VolumeModificationRateExceeded: %s); the last one began " % moto_aws.RATE_MESSAGE)
    assert entry["from"] == (last["StartTime"] + datetime.timedelta(hours=24)).isoformat(), entry
    assert described(ec2, vid)[:2] == (4000, 1000)
