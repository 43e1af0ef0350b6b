"""The monitoring role's Prometheus files, checked by Prometheus's own promtool (the distribution's, tests/bed/promtool.sh):
the alert rules rendered with the role's defaults pass `promtool check rules` and their unit tests
(tests/unit/alert_rules/, `promtool test rules`), and the scrape configuration rendered for two clusters passes
`promtool check config`, its key files and rules in place."""

import os
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "monitoring"
PROMTOOL = os.environ.get("LLAMA_RPC_PROMTOOL", "")


@pytest.fixture(scope="module")
def promtool():
    if not (PROMTOOL and os.access(PROMTOOL, os.X_OK)):
        pytest.fail("no promtool at LLAMA_RPC_PROMTOOL=%r: run tests/bed/promtool.sh (make check does)" % PROMTOOL)
    return PROMTOOL


def render(template, **values):
    """A role template as Ansible renders it, with the role's defaults and vars and the given values."""
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                     trim_blocks=True)  # Ansible's template module trims blocks too
    environment.filters["comment"] = lambda text: "# " + text
    environment.filters["to_json"] = lambda value: __import__("json").dumps(value)
    context = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    context.update(ansible_managed="Ansible managed", **values)
    return environment.from_string((ROLE / "templates" / template).read_text()).render(context)


def run(*argv):
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout + done.stderr


def test_the_rules_pass_promtools_check_and_their_unit_tests(promtool, tmp_path):
    (tmp_path / "llama_rpc_rules.yml").write_text(render("llama_rpc_rules.yml.j2"))
    shutil.copy(ROOT / "tests" / "unit" / "alert_rules" / "llama_rpc_rules.test.yml", tmp_path)
    code, output = run(promtool, "check", "rules", str(tmp_path / "llama_rpc_rules.yml"))
    assert code == 0 and "SUCCESS: 8 rules found" in output, output
    code, output = run(promtool, "test", "rules", str(tmp_path / "llama_rpc_rules.test.yml"))
    assert code == 0 and "SUCCESS" in output, output


def test_every_rule_has_a_unit_test():
    rules = yaml.safe_load(render("llama_rpc_rules.yml.j2"))["groups"][0]["rules"]
    tests = yaml.safe_load((ROOT / "tests" / "unit" / "alert_rules" / "llama_rpc_rules.test.yml").read_text())["tests"]
    fired = {case["alertname"] for test in tests for case in test["alert_rule_test"] if case["exp_alerts"]}
    assert fired == {rule["alert"] for rule in rules}


def test_a_rule_that_does_not_parse_is_refused_by_promtool(promtool, tmp_path):
    """The check the role's template task runs before it installs the rules can fail."""
    broken = render("llama_rpc_rules.yml.j2").replace("llama_rpc_unit_active == 0", "llama_rpc_unit_active == == 0")
    (tmp_path / "rules.yml").write_text(broken)
    code, output = run(promtool, "check", "rules", str(tmp_path / "rules.yml"))
    assert code != 0 and "parse error" in output, output


def test_the_scrape_configuration_for_two_clusters_passes_promtools_check(promtool, tmp_path):
    keys = tmp_path / "keys"
    keys.mkdir()
    for cluster in ("master-a", "master-b"):
        (keys / (cluster + ".key")).write_text("not-a-real-key")
    (tmp_path / "rules.yml").write_text(render("llama_rpc_rules.yml.j2"))
    config = render("prometheus.yml.j2", inventory_hostname="master-a", _monitoring_listen="127.0.0.1:9090",
                    _monitoring_rules_file=str(tmp_path / "rules.yml"), _monitoring_key_dir=str(keys),
                    _monitoring_targets=[
                        {"node": "master-a", "cluster": "master-a", "role": "master", "exporter": "10.0.0.1:9100"},
                        {"node": "worker-1", "cluster": "master-a", "role": "worker", "exporter": "10.0.0.2:9100"},
                        {"node": "master-b", "cluster": "master-b", "role": "master", "exporter": "10.0.1.1:9100"},
                        {"node": "worker-b1", "cluster": "master-b", "role": "worker", "exporter": "[fd00::2]:9100"}],
                    _monitoring_servers_watched=[{"cluster": "master-a", "address": "10.0.0.1:8080"},
                                                 {"cluster": "master-b", "address": "10.0.1.1:8080"}])
    (tmp_path / "prometheus.yml").write_text(config)
    code, output = run(promtool, "check", "config", str(tmp_path / "prometheus.yml"))
    assert code == 0 and "SUCCESS" in output, output
    parsed = yaml.safe_load(config)
    jobs = [job["job_name"] for job in parsed["scrape_configs"]]
    assert jobs == ["prometheus", "node", "llama-server-master-a", "llama-server-master-b"]
    assert "not-a-real-key" not in config
