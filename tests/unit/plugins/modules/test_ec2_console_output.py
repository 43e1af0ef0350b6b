"""ec2_console_output against moto in-process: the console as botocore hands it over, the wait, the refusal naming
the instances. moto's console is a fixed text, so each instance's console here is its tag testbed/console."""

import pytest

moto = pytest.importorskip("moto")  # the lowest ansible-core's venv has no moto

# pylint: disable=wrong-import-position
import boto3  # noqa: E402
from moto.core.responses import ActionResult  # noqa: E402
from moto.core.utils import utcnow  # noqa: E402
from moto.ec2.responses.general import General  # noqa: E402
from moto.ec2.utils import Base64EncodedString  # noqa: E402

from ansible_collections.graviton.llama_rpc.plugins.modules import ec2_console_output as module  # noqa: E402

from tests.unit.plugins.module_runner import run_module  # noqa: E402

REGION = "eu-west-1"
KEYS = "-----BEGIN SSH HOST KEY KEYS-----\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA root@host\n-----END SSH HOST KEY KEYS-----\n"
END = "-----END SSH HOST KEY KEYS-----"


def tagged_console(self):
    instance = self.ec2_backend.get_instance(self._get_param("InstanceId"))  # pylint: disable=protected-access
    text = {tag["key"]: tag["value"] for tag in instance.get_tags()}.get("testbed/console", "")
    return ActionResult({"InstanceId": instance.id, "Timestamp": utcnow(), "Output": Base64EncodedString.from_raw_string(text)})


@pytest.fixture(name="ec2", scope="module")
def fixture_ec2():
    """One mocked account for the file's tests: moto's EC2 takes seconds to set up."""
    with pytest.MonkeyPatch.context() as patch, moto.mock_aws():
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.setattr(General, "get_console_output", tagged_console)
        yield boto3.client("ec2", region_name=REGION)


IMAGE = {}


def instance(ec2, console):
    image = IMAGE.setdefault("id", ec2.describe_images(Owners=["amazon"], MaxResults=5)["Images"][0]["ImageId"])
    tags = [{"Key": "testbed/console", "Value": console}] if console else [{"Key": "Name", "Value": "silent"}]
    return ec2.run_instances(ImageId=image, InstanceType="t4g.nano", MinCount=1, MaxCount=1,
                             TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])["Instances"][0]["InstanceId"]


def test_returns_each_console_as_text(ec2, capsys):
    booted, other = instance(ec2, "boot\n" + KEYS), instance(ec2, "still booting\n")
    result = run_module(module.main, capsys, region=REGION, instance_ids=[booted, other])
    assert result["consoles"] == {booted: "boot\n" + KEYS, other: "still booting\n"} and result["waited"] == 0


def test_waits_until_every_console_shows_the_text(ec2, capsys, monkeypatch):
    booted, late = instance(ec2, KEYS), instance(ec2, "cloud-init running\n")
    reads = []

    def sleep(seconds):  # the late instance finishes its first boot while the module waits
        reads.append(seconds)
        ec2.create_tags(Resources=[late], Tags=[{"Key": "testbed/console", "Value": "cloud-init running\n" + KEYS}])

    monkeypatch.setattr(module.time, "sleep", sleep)
    result = run_module(module.main, capsys, region=REGION, instance_ids=[booted, late], wait_for=END, interval=3)
    assert reads == [3] and END in result["consoles"][late] and END in result["consoles"][booted]


def test_refuses_naming_the_instances_whose_console_lacks_the_text(ec2, capsys, monkeypatch):
    booted, silent = instance(ec2, KEYS), instance(ec2, "")
    monkeypatch.setattr(module.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(module.time, "monotonic", iter(range(0, 1000, 10)).__next__)  # each read takes 10 s
    result = run_module(module.main, capsys, region=REGION, instance_ids=[booted, silent], wait_for=END, timeout=30, interval=10)
    assert result["failed"] and result["missing"] == [silent], result
    assert f"is not in the console of {silent} in {REGION} after" in result["msg"] and booted not in result["msg"]


def test_a_throttled_call_is_retried_with_backoff(ec2, capsys, monkeypatch):
    """EC2 answers RequestLimitExceeded to the first read (its throttling of a burst of calls): the module waits and asks again,
    amazon.aws's AWSRetry, instead of failing the run."""
    from moto.ec2.exceptions import EC2ClientError  # pylint: disable=import-outside-toplevel
    booted = instance(ec2, KEYS)
    calls, slept = [], []

    def throttled_once(self):
        calls.append(1)
        if len(calls) == 1:
            raise EC2ClientError("RequestLimitExceeded", "Request limit exceeded.")
        return tagged_console(self)

    monkeypatch.setattr(General, "get_console_output", throttled_once)
    monkeypatch.setattr(module.time, "sleep", slept.append)
    result = run_module(module.main, capsys, region=REGION, instance_ids=[booted])
    assert result["consoles"] == {booted: KEYS} and len(calls) == 2 and len(slept) == 1, (result, calls, slept)
