"""module_utils/aws/instance_types.py: the C8g types' memory and price, the smallest type that holds a need, and what a
cluster costs running and stopped (its gp3 volumes, with what is provisioned beyond what gp3 includes)."""

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.aws import instance_types

GIB = 1 << 30


def test_the_smallest_type_holding_a_need():
    assert instance_types.smallest_holding(40 * GIB, 0.75)["name"] == "c8g.8xlarge"  # 64 GiB x 0.75 = 48 GiB
    assert instance_types.smallest_holding(48 * GIB, 0.75)["name"] == "c8g.8xlarge"
    assert instance_types.smallest_holding(48 * GIB + 1, 0.75)["name"] == "c8g.12xlarge"
    assert instance_types.smallest_holding(289 * GIB, 0.75) is None  # more than a c8g.48xlarge gives at 75%


def test_a_volume_pays_only_for_what_is_provisioned_beyond_gp3s_baseline():
    baseline = instance_types.volume_usd_month(100)
    assert baseline == pytest.approx(100 * instance_types.GP3_USD_PER_GB_MONTH)
    faster = instance_types.volume_usd_month(100, iops=4000, throughput_mib_s=250)
    assert faster == pytest.approx(baseline + 1000 * instance_types.GP3_USD_PER_IOPS_MONTH
                                   + 125 * instance_types.GP3_USD_PER_MIB_S_MONTH)
    assert instance_types.volume_usd_month(100, iops=1000, throughput_mib_s=100) == pytest.approx(baseline)


def test_a_stopped_cluster_pays_for_its_volumes_only_and_an_unknown_type_is_named():
    one = instance_types.table()[0]
    cost = instance_types.cluster_cost([one["name"], "m7g.large"], [{"size": 30}, {"size": 30, "iops": None}])
    volumes = 2 * instance_types.volume_usd_month(30)
    assert cost["stopped_usd_month"] == pytest.approx(volumes) == pytest.approx(cost["volumes_usd_month"])
    assert cost["running_usd_hour"] == pytest.approx(one["usd_per_hour"] + volumes / instance_types.HOURS_PER_MONTH)
    assert cost["unpriced"] == ["m7g.large"]
