"""module_utils/aws/instance_types.py: the C8g types' memory and price, and the smallest type that holds a need."""

from ansible_collections.graviton.llama_rpc.plugins.module_utils.aws import instance_types

GIB = 1 << 30


def test_the_smallest_type_holding_a_need():
    assert instance_types.smallest_holding(40 * GIB, 0.75)["name"] == "c8g.8xlarge"  # 64 GiB x 0.75 = 48 GiB
    assert instance_types.smallest_holding(48 * GIB, 0.75)["name"] == "c8g.8xlarge"
    assert instance_types.smallest_holding(48 * GIB + 1, 0.75)["name"] == "c8g.12xlarge"
    assert instance_types.smallest_holding(289 * GIB, 0.75) is None  # more than a c8g.48xlarge gives at 75%
