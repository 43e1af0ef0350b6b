"""Bad input to monitoring fails with a message that names only the wrong settings, each with its fix, on the first
node, before any node changes: no package, no firewall, no file of the role. Real ansible-playbook runs of
playbooks/monitoring.yml against a real systemd container (a master with no cluster yet: its checks come first)."""

from pathlib import Path

import pytest

from tests.integration.bad_input import assert_refused
from tests.tools import containers

PLAYBOOK = Path(__file__).resolve().parents[3] / "playbooks" / "monitoring.yml"
HOST = NETWORK = "llama-rpc-monitoring-badinput"


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    with containers.throwaway_host(HOST, NETWORK, tmp_path_factory.mktemp("inventory")) as (container, inventory):
        yield container, containers.inventory(inventory, [HOST], group="llama_master")


def untouched(container):
    """Nothing of the role on the host: its directory, its packages, their settings, its units."""
    return containers.sh(container, "ls -d /etc/llama-rpc-monitoring /etc/default/prometheus* "
                                    "/etc/systemd/system/llama-rpc-* /usr/bin/prometheus* 2>/dev/null")[1].strip() == ""


# Every input rule, case by case, is a unit test (tests/unit/plugins/module_utils/input_rules/test_monitoring.py);
# these prove end to end that the playbook asks the rules on every node before it changes any.
CASES = {
    "a retention of a day and a half, and a disk bound in GiB": (
        {"monitoring_retention_time": "1.5d", "monitoring_retention_size": "2GiB"},
        ["monitoring_retention_time=1.5d: set a Prometheus duration of an hour or more, such as 15d or 12h. "
         "monitoring_retention_size=2GiB: set a Prometheus size of 64MB or more, such as 2GB, or 0 for no bound."]),
    "Prometheus on a host name, an alert bound in plain minutes": (
        {"monitoring_prometheus_address": "prometheus.internal", "monitoring_alert_down_for": 5},
        ["monitoring_prometheus_address='prometheus.internal' is not an IP address",
         "monitoring_alert_down_for=5: set a Prometheus duration, such as 1m or 30s."]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_refused_by_name_before_any_node_changes(host, case):
    container, inventory = host
    overrides, messages = CASES[case]
    result = containers.run_playbook(inventory, PLAYBOOK, overrides)
    output = result.stdout + result.stderr
    assert_refused(case, result, messages, untouched(container))
    named = {setting for setting in ("monitoring_retention_time=", "monitoring_retention_size=", "monitoring_prometheus_address=",
                                     "monitoring_alert_down_for=", "monitoring_exporter_port=", "monitoring_scrape_interval=")
             if setting in output}
    assert named == {name + "=" for name in overrides}, f"{case}: a good setting was named: {named}"
