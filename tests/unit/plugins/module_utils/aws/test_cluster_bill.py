"""module_utils/aws/cluster_bill.py: every line AWS bills for a cluster aws_infra makes, running and stopped, and what
keeps billing while stopped in words."""

import re
from pathlib import Path

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.aws import cluster_bill as bill

ROOT = Path(__file__).resolve().parents[5]
README_TYPES = ["c8g.8xlarge", "c8g.4xlarge", "c8g.4xlarge"]


def readme_volumes(iops=4000, throughput=1000, tags=None):
    """The README's cluster: volumes of 110 GB (the master) and 70 GB (each worker), provisioned as aws_infra's defaults."""
    return [{"id": "vol-%d" % index, "size": size, "iops": iops, "throughput": throughput, "tags": tags or {}}
            for index, size in enumerate((110, 70, 70))]


def test_a_volume_pays_only_for_what_is_provisioned_beyond_gp3s_baseline():
    baseline = bill.volume_usd_month(100)
    assert baseline == pytest.approx(100 * bill.GP3_USD_PER_GB_MONTH)
    faster = bill.volume_usd_month(100, iops=4000, throughput_mib_s=250)
    assert faster == pytest.approx(baseline + 1000 * bill.GP3_USD_PER_IOPS_MONTH + 125 * bill.GP3_USD_PER_MIB_S_MONTH)
    assert bill.volume_usd_month(100, iops=1000, throughput_mib_s=100) == pytest.approx(baseline)


def test_the_readme_cluster_running_counts_every_line_with_its_source():
    cost = bill.cluster_bill(README_TYPES, readme_volumes(), public_ipv4=1)
    lines = {line["item"]: line for line in cost["running_lines"]}
    assert list(lines) == ["3 instances (c8g.8xlarge, 2 x c8g.4xlarge)", "volumes' storage (250 GB of gp3)",
                           "volumes' performance beyond gp3's baseline (4000 IOPS and 1000 MiB/s)",
                           "1 public IPv4 address(es)"]
    assert lines["3 instances (c8g.8xlarge, 2 x c8g.4xlarge)"]["usd_hour"] == pytest.approx(1.27616 + 2 * 0.63808)
    assert lines["volumes' storage (250 GB of gp3)"]["usd_hour"] == pytest.approx(250 * 0.08 / 730)
    performance = 3 * (1000 * 0.005 + 875 * 0.040) / 730  # IOPS over 3,000, MiB/s over 125
    assert lines["volumes' performance beyond gp3's baseline (4000 IOPS and 1000 MiB/s)"]["usd_hour"] == pytest.approx(performance)
    assert lines["1 public IPv4 address(es)"]["usd_hour"] == pytest.approx(0.005)
    assert all(line["source"].startswith("https://aws.amazon.com/") for line in cost["running_lines"])
    assert cost["running_usd_hour"] == pytest.approx(sum(line["usd_hour"] for line in cost["running_lines"]))
    assert cost["unpriced"] == [] and cost["unreported"] == []


def test_a_stopped_cluster_with_lowered_volumes_costs_under_two_percent_of_its_running_hour():
    """Lowered at the stop, the volumes cost their storage alone; the master's public address is released."""
    cost = bill.cluster_bill(README_TYPES, readme_volumes(), public_ipv4=1)
    assert cost["stopped_usd_month"] == pytest.approx(250 * 0.08)
    assert cost["stopped_share"] == pytest.approx(cost["stopped_usd_hour"] / cost["running_usd_hour"])
    assert cost["stopped_share"] < 0.02
    assert cost["stopped_bills"] == ["the volumes' storage ($20.00 a month) until playbooks/teardown.yml deletes them"]
    kept = bill.cluster_bill(README_TYPES, readme_volumes(), public_ipv4=1, lowered_when_stopped=False)
    assert kept["stopped_usd_month"] == pytest.approx(140.0) and kept["stopped_share"] > 0.06
    assert "a stop lowers it with aws_infra_stopped_volumes_baseline: true" in kept["stopped_bills"][1]


def test_a_stopped_cluster_is_priced_as_it_is_and_as_its_start_restores_it():
    lowered = readme_volumes(3000, 125, tags={bill.PROVISIONED_TAG: "4000/1000"})
    stopped = bill.cluster_bill(README_TYPES, lowered, public_ipv4=1, running_now=False)
    running = bill.cluster_bill(README_TYPES, readme_volumes(), public_ipv4=1)
    assert stopped["running_usd_hour"] == pytest.approx(running["running_usd_hour"])
    assert stopped["stopped_usd_month"] == pytest.approx(20.0)
    # a stop AWS did not let lower the volumes: the stopped figure is what they are, and the words say why
    blocked = bill.cluster_bill(README_TYPES, readme_volumes(), public_ipv4=1, running_now=False)
    assert blocked["stopped_usd_month"] == pytest.approx(140.0)
    assert "AWS did not let this stop lower it" in blocked["stopped_bills"][1]


def test_a_nat_gateway_bills_running_and_stopped_and_says_how_to_stop_it():
    without = bill.cluster_bill(README_TYPES, readme_volumes(), public_ipv4=1)
    with_nat = bill.cluster_bill(README_TYPES, readme_volumes(), public_ipv4=1, nat_gateways=1)
    assert with_nat["running_usd_hour"] - without["running_usd_hour"] == pytest.approx(0.045 + 0.005)
    assert with_nat["stopped_usd_hour"] - without["stopped_usd_hour"] == pytest.approx(0.045 + 0.005)
    assert with_nat["stopped_lines"][-1]["item"] == "1 NAT gateway(s) and their Elastic IPs"
    assert with_nat["stopped_lines"][-1]["source"] == bill.VPC_PRICES
    words = with_nat["stopped_bills"][-1]
    assert "whether the cluster runs or not" in words and "aws_infra_nat_gateway: false" in words and "$0.045 per GB" in words


def test_what_aws_did_not_report_is_named_and_unknown_types_left_out():
    cost = bill.cluster_bill(["c8g.4xlarge", "m7g.large"], [{"id": "vol-a", "size": 30, "iops": 3000},
                                                            {"id": "vol-b", "size": 30, "iops": 3000, "throughput": 125}])
    assert cost["unreported"] == ["vol-a"] and cost["unpriced"] == ["m7g.large"]
    assert cost["stopped_usd_month"] == pytest.approx(60 * 0.08)


def test_the_readme_gives_the_figures_the_playbooks_print():
    """One figure in the README, the one provision.yml, stop.yml and start.yml print for its cluster."""
    readme = (ROOT / "README.md").read_text()
    cost = bill.cluster_bill(README_TYPES, readme_volumes(), public_ipv4=1)
    running = re.search(r"\*\*What it costs:\*\* \$(\d+\.\d\d) per hour", readme)
    stopped = re.search(r"Stopped, the README's cluster costs \$(\d+\.\d\d) a month", readme)
    assert running and running.group(1) == "%.2f" % cost["running_usd_hour"], running and running.group(0)
    assert stopped and stopped.group(1) == "%.2f" % cost["stopped_usd_month"], stopped and stopped.group(0)
    assert "%.1f%%" % (100 * cost["stopped_share"]) in readme
