"""The example deploy pipeline (examples/github-actions) calls this collection as it is: the playbooks it names
exist, every variable it passes is one a role takes, and it tears the cluster down after a failure or a
cancellation. (Its schema and security are checked by check-jsonschema and zizmor in the lint stage; its
result check runs against a real inference result in the cluster scenario.)"""

import re
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / "examples" / "github-actions").glob("*.yml"))
ROLE_VARIABLES = {
    name
    for specs in (ROOT / "roles").glob("*/meta/argument_specs.yml")
    for entry_point in yaml.safe_load(specs.read_text())["argument_specs"].values()
    for name in entry_point.get("options") or {}
}


def steps(workflow):
    # PyYAML reads the key `on` as True; only the jobs matter here.
    return [step for job in yaml.safe_load(workflow.read_text())["jobs"].values() for step in job["steps"]]


def shell(workflow):
    return "\n".join(step.get("run", "") for step in steps(workflow))


def test_there_is_an_example():
    assert WORKFLOWS, "examples/github-actions/ holds no workflow"


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda path: path.name)
def test_playbooks_it_runs_exist(workflow):
    named = re.findall(r"ansible-playbook\s+(\S+)", shell(workflow))
    assert named, "the workflow runs no playbook"
    for playbook in named:
        match = re.fullmatch(r"graviton\.llama_rpc\.(\w+)|playbooks/(\w+)\.yml", playbook)
        assert match, f"{playbook}: run the collection's playbooks by name (graviton.llama_rpc.<name>)"
        assert (ROOT / "playbooks" / f"{match.group(1) or match.group(2)}.yml").is_file(), f"{playbook} does not exist"


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda path: path.name)
def test_variables_it_passes_are_role_variables(workflow):
    commands = shell(workflow)
    passed = set(re.findall(r"-e\s+([a-z_][a-z0-9_]*)=", commands))
    passed |= set(re.findall(r'\{"([a-z_][a-z0-9_]*)":', commands))  # the secrets file it writes
    assert passed, "the workflow passes no variables"
    assert passed <= ROLE_VARIABLES, f"no role takes {sorted(passed - ROLE_VARIABLES)}"


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda path: path.name)
def test_tears_down_after_failure_and_cancellation(workflow):
    teardown = [step for step in steps(workflow) if "graviton.llama_rpc.teardown" in step.get("run", "")]
    assert len(teardown) == 1, "one step should run the teardown playbook"
    condition = teardown[0].get("if", "")
    for needed in ("always()", "failure()", "cancelled()"):
        assert needed in condition, f"the teardown step's if: lacks {needed}: {condition!r}"


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda path: path.name)
def test_secrets_never_reach_a_command_line(workflow):
    for step in steps(workflow):
        assert "secrets." not in step.get("run", ""), f"step {step.get('name')!r}: pass secrets through env:, not run:"


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda path: path.name)
def test_its_python_runs_the_pinned_ansible_core(workflow):
    """The Python the pipeline sets up is one the ansible-core of requirements/controller.txt installs on (ansible-core
    2.20 and later need 3.12): read from that ansible-core's own metadata, in the venv whose pin it is."""
    pinned = re.search(r"^ansible-core==(\S+)$", (ROOT / "requirements" / "controller.txt").read_text(), re.M).group(1)
    if metadata.version("ansible-core") != pinned:
        pytest.skip("this venv has ansible-core %s, not the pinned %s (the lowest venv)" % (metadata.version("ansible-core"), pinned))
    requires = SpecifierSet(metadata.metadata("ansible-core")["Requires-Python"])
    versions = [step["with"]["python-version"] for step in steps(workflow) if "setup-python" in step.get("uses", "")]
    assert versions, "the workflow sets up no Python"
    for version in versions:
        assert version + ".0" in requires, "python-version %s is not in ansible-core %s's Requires-Python %s" % (
            version, pinned, requires)
