"""What a cluster costs running and stopped, from the one price table (module_utils/aws/instance_types.py)."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.graviton.llama_rpc.plugins.filter.cluster_cost import cluster_cost


def test_the_readme_cluster_running_and_stopped():
    """The README's cluster: a c8g.8xlarge master and two c8g.4xlarge workers, volumes of 110 and 70 GB provisioned at
    1,000 MiB/s and 4,000 IOPS."""
    volumes = [{"size": 110, "iops": 4000, "throughput": 1000}] + [{"size": 70, "iops": 4000, "throughput": 1000}] * 2
    cost = cluster_cost(["c8g.8xlarge", "c8g.4xlarge", "c8g.4xlarge"], volumes)
    per_volume_extra = 1000 * 0.005 + 875 * 0.040  # IOPS over 3,000, MiB/s over 125
    month = 250 * 0.08 + 3 * per_volume_extra
    assert cost["stopped_usd_month"] == pytest.approx(month) == pytest.approx(140.0)
    assert cost["running_usd_hour"] == pytest.approx(1.27616 + 2 * 0.63808 + month / 730)
    assert cost["unpriced"] == []


def test_gp3_at_its_baseline_costs_its_storage_only_and_unknown_types_are_named():
    cost = cluster_cost(["c8g.4xlarge", "m7g.large"], [{"size": 30, "iops": 3000, "throughput": 125}, {"size": 30}])
    assert cost["stopped_usd_month"] == pytest.approx(60 * 0.08)
    assert cost["unpriced"] == ["m7g.large"]


def test_it_refuses_what_is_not_a_list_of_types():
    with pytest.raises(AnsibleFilterError, match="needs a list of instance types"):
        cluster_cost("c8g.4xlarge")
