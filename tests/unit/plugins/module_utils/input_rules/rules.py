"""What the input rules' tests share: a role's defaults as a user who sets nothing gets them, and the check that a
refusal names the bad settings and nothing else. The rules are called through the input_problems filter, as the roles'
pre-flights call them."""

import re
from pathlib import Path

import yaml
from ansible_collections.graviton.llama_rpc.plugins.filter.input_problems import input_problems

ROOT = Path(__file__).resolve().parents[5]


def defaults(role):
    """The role's defaults as a user who sets nothing gets them (templated ones are given by each test's context)."""
    values = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
    return {name: value for name, value in values.items() if not (isinstance(value, str) and "{{" in value)}


def refusals(role, context, overrides):
    # an entry point's rules (monitoring_exporter) take its role's defaults
    settings = defaults(role if (ROOT / "roles" / role).is_dir() else role.rsplit("_", 1)[0])
    settings.update(context)
    settings.update(overrides)
    return input_problems(settings, role)


def check(role, context, overrides, messages):
    """A refusal that holds every message and names no setting (name=value) that the messages do not name."""
    found = refusals(role, context, overrides)
    text = " ".join(found)
    assert found, "refused nothing"
    for message in messages:
        assert message in text, "%r not in %r" % (message, text)
    named = set(re.findall(r"\b([a-z][a-z0-9_]+)=", text))
    # the settings the case changed, and those its messages name
    expected = set(overrides) | set(re.findall(r"\b[a-z][a-z0-9]*_[a-z0-9_]+\b", " ".join(messages)))
    assert named <= expected, "a good setting was named: %s" % sorted(named - expected)
    return found
