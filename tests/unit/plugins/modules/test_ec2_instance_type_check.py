"""ec2_instance_type_check against moto in-process: the types a region offers with their architecture, vCPUs and
memory; a type not offered and a type of the wrong architecture each refused by name with its fix; a throttled read
retried (amazon.aws's AWSRetry)."""

import pytest

moto = pytest.importorskip("moto")  # the lowest ansible-core's venv has no moto

# pylint: disable=wrong-import-position
from moto.ec2.responses.instances import InstanceResponse  # noqa: E402

from ansible_collections.graviton.llama_rpc.plugins.modules import ec2_instance_type_check as module  # noqa: E402

from tests.unit.plugins.module_runner import run_module  # noqa: E402

REGION = "us-east-1"


@pytest.fixture(autouse=True, scope="module")
def account():
    with pytest.MonkeyPatch.context() as patch, moto.mock_aws():
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        yield


def test_a_graviton_type_is_offered_and_arm64(capsys):
    result = run_module(module.main, capsys, region=REGION, instance_types=["c7g.large", "c7g.large"], architecture="arm64")
    assert result["changed"] is False and list(result["instance_types"]) == ["c7g.large"]
    assert result["instance_types"]["c7g.large"] == {"offered": True, "architectures": ["arm64"], "vcpus": 2, "memory_mib": 4096}


def test_an_x86_type_for_arm64_and_a_type_not_offered_are_each_named(capsys):
    result = run_module(module.main, capsys, region=REGION, instance_types=["c5.large", "c99g.huge"], architecture="arm64")
    assert result["failed"] is True
    assert "c99g.huge is not offered in us-east-1 (choose a region that offers it, or another instance type)" in result["msg"]
    assert "c5.large is x86_64, not arm64 (Graviton types have a g after the generation" in result["msg"]
    assert result["instance_types"]["c99g.huge"] == {"offered": False, "architectures": [], "vcpus": None, "memory_mib": None}


def test_a_throttled_read_is_retried(capsys, monkeypatch):
    from moto.ec2.exceptions import EC2ClientError  # pylint: disable=import-outside-toplevel
    calls, slept = [], []
    describe = InstanceResponse.describe_instance_types

    def throttled_once(self):
        calls.append(1)
        if len(calls) == 1:
            raise EC2ClientError("RequestLimitExceeded", "Request limit exceeded.")
        return describe(self)

    monkeypatch.setattr(InstanceResponse, "describe_instance_types", throttled_once)
    monkeypatch.setattr("time.sleep", slept.append)
    result = run_module(module.main, capsys, region=REGION, instance_types=["c7g.large"])
    assert result["instance_types"]["c7g.large"]["offered"] is True and len(calls) == 2 and len(slept) == 1
