# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""monitoring's input rules: its settings (as the user set them, and what the role resolved from the host and the
inventory) in, the refusals out, one sentence each naming the variable and what to write instead; [] when all are good.
Prometheus's durations and sizes are parsed as Prometheus parses them (its model.ParseDuration and units.ParseBase2Bytes
take the same units), so a value refused here is one Prometheus would refuse at its start."""

from __future__ import annotations

from ansible_collections.graviton.llama_rpc.plugins.module_utils.network.addresses import problems as address_problems
from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.common import in_range, number, sentences

DURATION_UNITS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
SIZE_UNITS = {"EB": 1 << 60, "PB": 1 << 50, "TB": 1 << 40, "GB": 1 << 30, "MB": 1 << 20, "KB": 1 << 10, "B": 1}


def _units_in_order(text, units):
    """[(number, unit)] of text such as 1h30m, each unit once and from the largest down; None when it is not that."""
    found, rest, order = [], text, list(units)
    while rest:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        if digits == 0:
            return None
        value, rest = int(rest[:digits]), rest[digits:]
        unit = next((one for one in sorted(units, key=len, reverse=True) if rest.startswith(one)), None)
        if unit is None or (found and order.index(unit) <= order.index(found[-1][1])):
            return None
        found.append((value, unit))
        rest = rest[len(unit):]
    return found or None


def _in_units(value, units):
    """The sum of a Prometheus duration or size in its units (0 alone needs none), or None when Prometheus would
    refuse it."""
    text = str(value).strip()
    if text == "0":
        return 0
    parts = _units_in_order(text, units)
    return None if parts is None else sum(count * units[unit] for count, unit in parts)


def duration_seconds(value):
    """Seconds of a Prometheus duration (15d, 1h30m, 500ms, 0), or None when Prometheus would refuse it."""
    return _in_units(value, DURATION_UNITS)


def size_bytes(value):
    """Bytes of a Prometheus size (2GB, 512MB, 0: no bound), or None when Prometheus would refuse it."""
    return _in_units(value, SIZE_UNITS)


def _settings(s):
    """Every variable of the role, checked by both entry points: a bad one is refused on the first node, before any
    node changes."""
    found = []
    found += address_problems([{"name": "monitoring_prometheus_address", "value": str(s["monitoring_prometheus_address"]),
                                "kind": "address"}])
    for name in ("monitoring_prometheus_port", "monitoring_exporter_port"):
        if not in_range(s[name], 1, 65535):
            found.append("%s=%s: set it from 1 to 65535" % (name, s[name]))
    for name in ("monitoring_scrape_interval", "monitoring_metrics_interval"):
        if not in_range(s[name], 1, 3600):
            found.append("%s=%s: set it from 1 to 3600 seconds" % (name, s[name]))
    retention = duration_seconds(s["monitoring_retention_time"])
    if retention is None or retention < 3600:
        found.append("monitoring_retention_time=%s: set a Prometheus duration of an hour or more, such as 15d or 12h"
                     % s["monitoring_retention_time"])
    size = size_bytes(s["monitoring_retention_size"])
    if size is None or 0 < size < 64 << 20:
        found.append("monitoring_retention_size=%s: set a Prometheus size of 64MB or more, such as 2GB, or 0 for no bound"
                     % s["monitoring_retention_size"])
    for name in ("monitoring_alert_down_for", "monitoring_alert_saturated_for"):
        if duration_seconds(s[name]) is None:
            found.append("%s=%s: set a Prometheus duration, such as 1m or 30s" % (name, s[name]))
    for name in ("monitoring_alert_disk_free_ratio", "monitoring_alert_memory_free_ratio"):
        value = number(s[name])
        if value is None or not 0 < value < 1:
            found.append("%s=%s: set a fraction between 0 and 1, such as 0.1" % (name, s[name]))
    ratio = number(s["monitoring_alert_load_ratio"])
    if ratio is None or ratio <= 1:
        found.append("monitoring_alert_load_ratio=%s: set a ratio over 1, such as 1.5 (a load half again as long as "
                     "predicted)" % s["monitoring_alert_load_ratio"])
    if not in_range(s.get("monitoring_alert_unanswered_seconds", 60), 1, 86400):
        found.append("monitoring_alert_unanswered_seconds=%s: set it from 1 to 86400 seconds (how long a worker may leave "
                     "a client waiting)" % s.get("monitoring_alert_unanswered_seconds"))
    return found


def monitoring_exporter(settings):
    """node_exporter's rules on one node. Beside the variables: host, address (where the exporter listens: the tunnel's
    or the default-route address), scrapers (the hosts that scrape it) and scraper_addresses (theirs, as this node sees
    them; '' when unknown), tunnelled (this node is on the WireGuard tunnel), servers (monitoring_prometheus_group's)."""
    s = settings
    found = _settings(s)
    found += address_problems([{"name": "the exporter's address", "value": s["address"], "kind": "address",
                                "empty_fix": "%s has no default route to take its private address from: give it one" % s["host"]}])
    if s["tunnelled"] and s["servers"]:
        found.append("%s is on the WireGuard tunnel, where only its master reaches it: leave group '%s' empty (each master "
                     "then scrapes its own cluster), or turn the tunnel off" % (s["host"], s["monitoring_prometheus_group"]))
    for host, address in zip(s["scrapers"], s["scraper_addresses"]):
        if not address:
            found.append("%s scrapes %s but has no %s address: run the playbook on it too (playbooks/monitoring.yml "
                         "gathers every host's facts first)" % (host, s["host"], "tunnel" if s["tunnelled"] else "private"))
    return sentences(found)


def monitoring(settings):
    """Prometheus's rules on its host. Beside the variables: host, targets (every node it scrapes: node, exporter
    address:port or '' when the node has none published) and masters (the clusters it watches)."""
    s = settings
    found = _settings(s)
    if not s["masters"]:
        found.append("%s watches no cluster: put the masters in group '%s', or set monitoring_master_group to their "
                     "group" % (s["host"], s["monitoring_master_group"]))
    missing = [target["node"] for target in s["targets"] if not target["exporter"]]
    if missing:
        found.append("%s: no node_exporter published there: run playbooks/monitoring.yml on every node of the cluster "
                     "(its first plays install them), not on the Prometheus host alone" % ", ".join(missing))
    return sentences(found)
