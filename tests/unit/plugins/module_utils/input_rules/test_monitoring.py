"""The input rules of monitoring (module_utils/input_rules/monitoring.py), case by case: each bad setting is refused with
a sentence that names it and the fix, only the wrong ones are named, and the role's own defaults pass. Prometheus's
durations and sizes are read as Prometheus reads them."""

import pytest
from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.monitoring import duration_seconds, size_bytes
from tests.unit.plugins.module_utils.input_rules.rules import refusals, check

SERVER = {"host": "master-a", "masters": ["master-a"],
          "targets": [{"node": "master-a", "exporter": "10.0.0.1:9100"}, {"node": "worker-1", "exporter": "10.0.0.2:9100"}]}
NODE = {"host": "worker-1", "address": "10.0.0.2", "scrapers": ["master-a"], "scraper_addresses": ["10.0.0.1"],
        "tunnelled": False, "servers": []}

SERVER_CASES = {
    "a host name to listen on": ({"monitoring_prometheus_address": "prometheus.internal"},
                                 ["monitoring_prometheus_address='prometheus.internal' is not an IP address"]),
    "port 0 and 70000": ({"monitoring_prometheus_port": 0, "monitoring_exporter_port": 70000},
                         ["monitoring_exporter_port=70000: set it from 1 to 65535",
                          "monitoring_prometheus_port=0: set it from 1 to 65535"]),
    "a scrape every 0 s": ({"monitoring_scrape_interval": 0}, ["monitoring_scrape_interval=0: set it from 1 to 3600 seconds"]),
    "a retention in days with a decimal point": (
        {"monitoring_retention_time": "1.5d"},
        ["monitoring_retention_time=1.5d: set a Prometheus duration of an hour or more, such as 15d or 12h"]),
    "a retention of ten minutes": ({"monitoring_retention_time": "10m"}, ["monitoring_retention_time=10m: set a Prometheus duration of an hour"]),
    "a size in gigabytes written GiB": ({"monitoring_retention_size": "2GiB"},
                                        ["monitoring_retention_size=2GiB: set a Prometheus size of 64MB or more"]),
    "a size of one kilobyte": ({"monitoring_retention_size": "1KB"}, ["monitoring_retention_size=1KB: set a Prometheus size"]),
    "alert bounds in minutes as numbers": ({"monitoring_alert_down_for": 5, "monitoring_alert_saturated_for": "5 minutes"},
                                           ["monitoring_alert_down_for=5: set a Prometheus duration",
                                            "monitoring_alert_saturated_for=5 minutes: set a Prometheus duration"]),
    "free ratios as percentages": ({"monitoring_alert_disk_free_ratio": 10, "monitoring_alert_memory_free_ratio": "0"},
                                   ["monitoring_alert_disk_free_ratio=10: set a fraction between 0 and 1",
                                    "monitoring_alert_memory_free_ratio=0: set a fraction between 0 and 1"]),
    "a load ratio of one": ({"monitoring_alert_load_ratio": 1}, ["monitoring_alert_load_ratio=1: set a ratio over 1"]),
    "no masters": ({"masters": [], "targets": []}, ["master-a watches no cluster: put the masters in group 'llama_master'"]),
    "a worker without an exporter": (
        {"targets": SERVER["targets"] + [{"node": "worker-2", "exporter": ""}]},
        ["worker-2: no node_exporter published there: run playbooks/monitoring.yml on every node of the cluster"]),
}

NODE_CASES = {
    "a node without a default route": ({"address": ""}, ["worker-1 has no default route to take its private address from"]),
    "a figures interval of 0": ({"monitoring_metrics_interval": 0}, ["monitoring_metrics_interval=0: set it from 1 to 3600 seconds"]),
    "a tunnelled node with a Prometheus host of its own": (
        {"tunnelled": True, "address": "10.99.0.2", "servers": ["prometheus-1"], "scrapers": ["prometheus-1"],
         "scraper_addresses": ["10.0.0.9"]},
        ["worker-1 is on the WireGuard tunnel, where only its master reaches it: leave group 'llama_monitoring' empty"]),
    "a master whose address is unknown": ({"scraper_addresses": [""]},
                                          ["master-a scrapes worker-1 but has no private address: run the playbook on it too"]),
}


def test_monitoring_defaults_pass():
    assert refusals("monitoring", SERVER, {}) == []
    assert refusals("monitoring", SERVER, {"monitoring_prometheus_address": "fd00::1", "monitoring_retention_size": 0,
                                           "monitoring_retention_time": "1w2d", "monitoring_alert_down_for": "6s"}) == []
    assert refusals("monitoring_exporter", NODE, {}) == []
    assert refusals("monitoring_exporter", NODE, {"tunnelled": True, "address": "10.99.0.2", "scraper_addresses": ["10.99.0.1"]}) == []


@pytest.mark.parametrize("case", sorted(SERVER_CASES))
def test_prometheus_bad_input_is_refused_by_name(case):
    overrides, messages = SERVER_CASES[case]
    found = check("monitoring", SERVER, overrides, messages)
    assert len(found) == len(messages), found


@pytest.mark.parametrize("case", sorted(NODE_CASES))
def test_exporter_bad_input_is_refused_by_name(case):
    overrides, messages = NODE_CASES[case]
    found = check("monitoring_exporter", NODE, overrides, messages)
    assert len(found) == len(messages), found


@pytest.mark.parametrize("text, seconds", [("15d", 15 * 86400), ("1h30m", 5400), ("500ms", 0.5), ("1w2d", 9 * 86400),
                                           ("0", 0), ("1y", 365 * 86400), ("90s", 90)])
def test_durations_are_read_as_prometheus_reads_them(text, seconds):
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "15", "1.5h", "30m1h", "1h1h", "d", "15 d", "-1h", "1hh", "15D"])
def test_durations_prometheus_refuses_are_refused(text):
    assert duration_seconds(text) is None


@pytest.mark.parametrize("text, size", [("2GB", 2 << 30), ("512MB", 512 << 20),
                                        ("0", 0), ("1TB", 1 << 40)])
def test_sizes_are_read_as_prometheus_reads_them(text, size):
    assert size_bytes(text) == size


@pytest.mark.parametrize("text", ["", "2G", "2GiB", "2 GB", "1.5GB", "MB", "2gb"])
def test_sizes_prometheus_refuses_are_refused(text):
    assert size_bytes(text) is None
