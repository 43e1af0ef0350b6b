"""The cluster_cost filter: module_utils/aws/cluster_bill.py from a playbook (aws_infra's _cost.yml)."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.graviton.llama_rpc.plugins.filter.cluster_cost import cluster_cost


def test_it_passes_what_the_role_read_to_the_bill():
    volumes = [{"size": 110, "iops": 4000, "throughput": 1000}, "not a volume"]
    cost = cluster_cost(["c8g.8xlarge"], volumes, public_ipv4="1", nat_gateways="1", running_now=False)
    assert [line["item"] for line in cost["stopped_lines"]] == [
        "volumes' storage (110 GB of gp3)", "volumes' performance beyond gp3's baseline (4000 IOPS and 1000 MiB/s)",
        "1 NAT gateway(s) and their Elastic IPs"]
    assert cost["running_usd_hour"] == pytest.approx(1.27616 + (110 * 0.08 + 40) / 730 + 0.005 + 0.05)


def test_it_refuses_what_is_not_a_list_of_types():
    with pytest.raises(AnsibleFilterError, match="needs a list of instance types"):
        cluster_cost("c8g.4xlarge")
