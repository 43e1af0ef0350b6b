"""The collection's metadata says what the code does: dependencies, action groups, role specs."""

import re
from pathlib import Path

import pytest
import yaml
from ansible.release import __version__ as ansible_core_version
from ansible.module_utils.compat.version import LooseVersion

from tests.tools import role_docs

ROOT = Path(__file__).resolve().parents[2]
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
RUNTIME = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir()) if (ROOT / "roles").is_dir() else []

# A task key (namespace.collection.plugin:), module_defaults group or lookup naming a collection's plugin
FQCN_IN_YAML = re.compile(
    r"(?:^\s*(?:- )?([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.[a-z0-9_]+:(?:\s|$)"
    r"|(?:group/|lookup\(['\"]|query\(['\"])([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.[a-z0-9_]+)",
    re.M,
)
FQCN_IN_PYTHON = re.compile(r"ansible_collections\.([a-z0-9_]+)\.([a-z0-9_]+)\.")
# Task files that only check (the inputs, the hosts, the cluster) before anything changes.
CHECKS = ("_preflight", "_builds.yml", "_cluster_check.yml")
BUILT_IN = {"ansible.builtin", "ansible.legacy", f"{GALAXY['namespace']}.{GALAXY['name']}"}


def collections_used():
    """Collections referenced by what ships (roles, playbooks, plugins), not by tests."""
    used = set()
    for folder in ("roles", "playbooks", "plugins"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".yml", ".yaml"):
                for match in FQCN_IN_YAML.findall(path.read_text()):
                    used.add(".".join(part for part in match if part))
            elif path.suffix == ".py":
                used.update(".".join(m) for m in FQCN_IN_PYTHON.findall(path.read_text()))
    return used - BUILT_IN


def test_galaxy_identity():
    assert (GALAXY["namespace"], GALAXY["name"]) == ("graviton", "llama_rpc")
    assert re.fullmatch(r"\d+\.\d+\.\d+", GALAXY["version"])
    assert GALAXY["license"] and (ROOT / "LICENSE").is_file()


def test_galaxy_dependencies_are_exactly_what_the_code_uses():
    declared = set(GALAXY.get("dependencies") or {})
    used = collections_used()
    assert declared == used, f"galaxy.yml declares {sorted(declared)} but roles/playbooks/plugins use {sorted(used)}"


def test_build_ignores_test_and_ci_files():
    ignored = set(GALAXY["build_ignore"])
    for path in ("tests", "molecule", ".ci", "requirements", "Makefile"):
        assert path in ignored, f"add {path} to build_ignore in galaxy.yml"


def test_requires_ansible_admits_the_pinned_core():
    bound = RUNTIME["requires_ansible"]
    match = re.fullmatch(r">=(\d+\.\d+\.\d+)", bound)
    assert match, f"requires_ansible {bound!r} should be a plain lower bound"
    assert LooseVersion(ansible_core_version) >= LooseVersion(match.group(1))


def test_action_group_lists_every_module():
    modules = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
    assert sorted(RUNTIME["action_groups"]["llama_rpc"]) == modules


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_mirror_defaults(role):
    """meta/argument_specs.yml validates input before any task runs: it must know every default."""
    defaults_file = ROOT / "roles" / role / "defaults" / "main.yml"
    defaults = yaml.safe_load(defaults_file.read_text()) if defaults_file.exists() else {}
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    # The shared role (common) has no main entry point, and no defaults either. What a role reads of another's (its
    # variables and facts, on other hosts) it declares too, and has no default for.
    options = {name: option for name, option in specs["argument_specs"].get("main", {}).get("options", {}).items()
               if not name.startswith(OTHER_ROLES_PREFIXES(role))}
    assert set(defaults or {}) == set(options), f"{role}: defaults and argument_specs list different variables"
    for name, value in (defaults or {}).items():
        assert name.startswith(f"{role}_"), f"{role}: public variable {name} lacks the role prefix"
        assert options[name].get("default") == value, f"{role}: {name} default differs between defaults/ and argument_specs"


def OTHER_ROLES_PREFIXES(role):  # noqa: N802 (a constant of the role)
    return tuple(path.name + "_" for path in (ROOT / "roles").iterdir() if path.is_dir() and path.name != role)


HOSTVARS_READ = re.compile(r"hostvars\[(?:[^\[\]]|\[[^\]]*\])+\](?:\.(\w+)|\[['\"](\w+)['\"]\])")


@pytest.mark.parametrize("role", sorted(path.name for path in (ROOT / "roles").iterdir() if path.is_dir()))
def test_what_a_role_reads_of_another_it_declares(role):
    """A role that reads another's variable or fact on other hosts (hostvars[host].rpc_master_...) names it in its
    argument spec, as the inputs it takes: the doors and what passes through them show in one place."""
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    declared = {name for entry in specs.values() for name in (entry.get("options") or {})}
    read = set()
    for path in (ROOT / "roles" / role).rglob("*"):
        if path.is_file() and path.suffix in (".yml", ".j2") and "meta" not in path.parts:
            for line in path.read_text().splitlines():
                if not line.lstrip().startswith("#"):
                    read |= {match.group(1) or match.group(2) for match in HOSTVARS_READ.finditer(line)}
    foreign = {name for name in read if name.startswith(OTHER_ROLES_PREFIXES(role))}
    assert not foreign - declared, f"{role} reads, undeclared: {sorted(foreign - declared)}"


def test_role_readmes_carry_their_argument_specs():
    """Each role's README lists its variables as meta/argument_specs.yml has them (`make docs` writes them)."""
    assert role_docs.stale_readmes() == []


def test_a_generated_block_twice_in_a_readme_is_found(tmp_path, monkeypatch):
    """A README that carries the generated table twice (one of them stale or not) is named."""
    role = tmp_path / "roles" / "sample"
    (role / "meta").mkdir(parents=True)
    (role / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    short_description: A sample.\n    options: {}\n")
    table = role_docs.render(role)
    monkeypatch.setattr(role_docs, "roles", lambda: [role])
    (role / "README.md").write_text("# sample\n\n" + table + "\n")
    assert role_docs.stale_readmes() == []
    (role / "README.md").write_text("# sample\n\n" + table + "\n\n## Variables\n\n" + table + "\n")
    assert role_docs.stale_readmes() == [("sample", "README.md carries the generated variables section 2 times: keep one")]


@pytest.mark.parametrize("markup, expected", [
    ("Set O(rpc_master_model_src) to V(0) or C(s3://b/k) with M(ns.c.mod).", "Set `rpc_master_model_src` to `0` or `s3://b/k` with `ns.c.mod`."),
    ("An C(http(s)://) URL, I(once)", "An `http(s)://` URL, *once*"),
    ("E(AWS_REGION) for P(amazon.aws.aws_ec2#inventory)", "`AWS_REGION` for `amazon.aws.aws_ec2#inventory`"),
    (["two", "paragraphs | with a pipe"], "two paragraphs \\| with a pipe"),
])
def test_role_docs_markup(markup, expected):
    assert role_docs.markdown(markup) == expected


def main_steps(role, tasks_file="main.yml"):
    """The steps of a role's tasks/main.yml, those inside a block (aws_infra's, for its module_defaults) and those of an
    untagged import (rpc_master's plan.yml and serve.yml, its entry points for deploy.yml) included."""
    steps = yaml.safe_load((ROOT / "roles" / role / "tasks" / tasks_file).read_text())
    found = []
    for step in (inner for step in steps for inner in (step["block"] if "block" in step else [step])):
        imported = step.get("ansible.builtin.import_tasks")
        if imported and not step.get("tags") and not str(imported).startswith(CHECKS):
            found += main_steps(role, imported)
        else:
            found.append(step)
    return found


TAGGED_ROLES = [role for role in ROLES if (ROOT / "roles" / role / "tasks" / "main.yml").is_file()
                and any(step.get("tags") for step in main_steps(role))]


@pytest.mark.parametrize("role", TAGGED_ROLES)
def test_checks_run_under_every_tag_of_their_role(role):
    """`--tags <role>_configure` (or any other of the role's tags) still runs the checks before anything changes
    (as prometheus.prometheus tags its preflight): a task file that checks carries every tag the role uses."""
    steps = main_steps(role)
    tags = {tag for step in steps for tag in step.get("tags", [])}
    checks = [step for step in steps if str(step.get("ansible.builtin.import_tasks", "")).startswith(CHECKS)]
    assert checks, f"{role}: tasks/main.yml imports no preflight"
    for step in checks:
        assert tags <= set(step.get("tags", [])), f"{role}: {step['name']} lacks the tags {sorted(tags - set(step['tags']))}"


@pytest.mark.parametrize("role", TAGGED_ROLES)
def test_includes_pass_their_tags_on(role):
    """A dynamic include's tasks do not inherit its tags: `--tags llama_build` ran the include of _activate.yml and
    none of its tasks. Every tagged include in tasks/main.yml applies its tags to what it includes."""
    steps = main_steps(role)
    for step in steps:
        include = step.get("ansible.builtin.include_tasks", step.get("ansible.builtin.include_role"))
        if include is not None and step.get("tags"):
            applied = include.get("apply", {}).get("tags") if isinstance(include, dict) else None
            assert applied == step["tags"], f"{role}: {step['name']} does not apply its tags {step['tags']}"


# What each role keeps on a host. Another role learns it from the state the owner publishes (Ansible local facts,
# read through hostvars), never by reading these paths.
ROLE_FILES = {
    "llama_build": [r"build-record\.json", r"facts\.d/llama_rpc_build", r"/current/bin"],
    "rpc_worker": [r"/etc/llama-rpc-worker", r"/var/cache/llama-rpc-worker", r"facts\.d/llama_rpc_worker"],
    "rpc_master": [r"/etc/llama-rpc(?![-\w])", r"facts\.d/llama_rpc_master"],
    "rpc_tunnel": [r"/etc/llama-rpc-tunnel", r"facts\.d/llama_rpc_tunnel", r"private\.key"],
}


@pytest.mark.parametrize("owner", sorted(ROLE_FILES))
def test_no_role_reads_another_roles_files_by_path(owner):
    pattern = re.compile("|".join(ROLE_FILES[owner]))
    found = []
    for role in ROLES:
        if role == owner:
            continue
        for path in sorted((ROOT / "roles" / role).rglob("*")):
            if path.is_file() and path.parts[len(ROOT.parts) + 2] in ("tasks", "vars", "defaults", "templates", "handlers"):
                found += ["%s:%d" % (path.relative_to(ROOT), number) for number, line in enumerate(path.read_text().splitlines(), 1)
                          if pattern.search(line) and not line.lstrip().startswith("#")]
    assert not found, "%s's files named outside it (read its published state instead): %s" % (owner, found)


def every_task(node):
    """Every task of a task file's YAML, those inside blocks, rescues and always sections included."""
    if isinstance(node, list):
        return [task for item in node for task in every_task(item)]
    if not isinstance(node, dict):
        return []
    return [node] + every_task(node.get("block", [])) + every_task(node.get("rescue", [])) + every_task(node.get("always", []))


def aws_tasks(node):
    """Every task of a task file's YAML that calls an AWS module (amazon.aws's, or ours that talk to AWS)."""
    return [task for task in every_task(node) if any(key.startswith(("amazon.aws.", "graviton.llama_rpc.ec2_")) for key in task)]


def test_the_region_is_given_once_to_every_aws_module():
    """aws_infra_region reaches the AWS modules through module_defaults (amazon.aws's way), not task by task."""
    given = []
    # _host_keys_trust.yml reads the consoles of the run's hosts, in whatever regions they are (aws_infra_region is not set).
    tasks = ROOT / "roles" / "aws_infra" / "tasks"
    for path in sorted(set(tasks.glob("*.yml")) - {tasks / "host_keys.yml", tasks / "_host_keys_trust.yml"}):
        for task in aws_tasks(yaml.safe_load(path.read_text())):
            module = next(key for key in task if key.startswith(("amazon.aws.", "graviton.llama_rpc.")))
            if "region" in (task[module] or {}):
                given.append(f"{path.name}: {task.get('name')}")
    assert not given, f"tasks that set the region themselves: {given}"
    assert len(aws_tasks(yaml.safe_load((ROOT / "roles" / "aws_infra" / "tasks" / "_network.yml").read_text()))) > 5


def documented_plugins():
    """{(kind, name): version_added} of every module, filter and lookup the collection ships."""
    found = {}
    for kind, directory in (("modules", "modules"), ("filter", "filter"), ("lookup", "lookup")):
        for path in sorted((ROOT / "plugins" / directory).glob("*.py")):
            if path.name == "__init__.py":
                continue
            text = path.read_text()
            documentation = yaml.safe_load(text.split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0])
            found[(kind, path.stem)] = str(documentation.get("version_added"))
    return found


def test_each_release_lists_its_plugins_and_a_new_plugin_is_added_in_the_coming_one():
    """The changelog's releases name every released plugin once, in the release its version_added says. A plugin no
    release lists yet is added in galaxy.yml's version, which comes after the last release (antsibull-changelog lists it
    there when that version is released). No version_added names a version after galaxy.yml's."""
    releases = yaml.safe_load((ROOT / "changelogs" / "changelog.yaml").read_text())["releases"]
    listed = {}
    for version, release in releases.items():
        for module in release.get("modules", []):
            listed[("modules", module["name"])] = version
        for kind, plugins in release.get("plugins", {}).items():
            for plugin in plugins:
                listed[(kind, plugin["name"])] = version
    shipped = documented_plugins()
    newest = LooseVersion(GALAXY["version"])
    last_release = max(releases, key=LooseVersion)
    unreleased = {key: version for key, version in shipped.items() if key not in listed}
    # A released plugin that is no longer shipped is named in a removed_features entry (a fragment, or a release).
    removals = " ".join(str(entry) for fragment in (ROOT / "changelogs" / "fragments").glob("*.yml")
                        for entry in (yaml.safe_load(fragment.read_text()) or {}).get("removed_features", []))
    removals += " ".join(str(entry) for release in releases.values()
                         for entry in release.get("changes", {}).get("removed_features", []))
    removed = {key for key in listed if key not in shipped and "``%s``" % key[1] in removals}
    listed = {key: version for key, version in listed.items() if key not in removed}
    assert {key: version for key, version in shipped.items() if key in listed} == listed, \
        {key: (listed.get(key), shipped.get(key)) for key in listed if listed[key] != shipped.get(key)}
    assert all(version == GALAXY["version"] for version in unreleased.values()), unreleased
    assert not unreleased or newest > LooseVersion(last_release), (GALAXY["version"], last_release)
    assert all(LooseVersion(version) <= newest for version in shipped.values())
    later = [str(path.relative_to(ROOT)) for path in (ROOT / "roles").glob("*/*/*.yml")
             if re.search(r"before (\d+\.\d+\.\d+)", path.read_text())
             and any(LooseVersion(v) > newest for v in re.findall(r"before (\d+\.\d+\.\d+)", path.read_text()))]
    assert not later, f"migrations from a version after {newest}: {later}"


@pytest.mark.parametrize("layer", ["module_utils", "modules"])
def test_unit_tests_mirror_the_plugins_one_to_one(layer):
    """plugins/<layer>/<path>/<name>.py is tested in tests/unit/plugins/<layer>/<path>/test_<name>.py, and no test file
    there names a plugin that is gone."""
    plugins = ROOT / "plugins" / layer
    tests = ROOT / "tests" / "unit" / "plugins" / layer
    code = {path.relative_to(plugins) for path in plugins.rglob("*.py") if path.name != "__init__.py"}
    tested = {path.relative_to(tests).with_name(path.name[len("test_"):]) for path in tests.rglob("test_*.py")}
    assert sorted(map(str, code - tested)) == [], "untested"
    assert sorted(map(str, tested - code)) == [], "tests of nothing"


def test_every_plugin_has_a_unit_test_file_of_its_own():
    """tests/unit/plugins mirrors plugins/: each plugin of every type (documentation fragments aside: they hold text)
    and each module_utils file has tests/unit/plugins/<type>/.../test_<name>.py."""
    missing = []
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        relative = path.relative_to(ROOT / "plugins")
        if path.name == "__init__.py" or relative.parts[0] == "doc_fragments":
            continue
        test = ROOT / "tests" / "unit" / "plugins" / relative.parent / ("test_" + path.name)
        if not test.is_file():
            missing.append(str(relative))
    assert not missing, "plugins without a unit test file of their own: %s" % ", ".join(missing)


@pytest.mark.parametrize("role", sorted(path.name for path in (ROOT / "roles").iterdir() if path.is_dir()))
def test_a_roles_entry_points_show_in_its_file_tree(role):
    """tasks/<entry>.yml for each entry point meta/argument_specs.yml declares, and _<name>.yml for every other task
    file (the steps only the role's own tasks include): the doors show in the tree (docs/architecture.md)."""
    entries = set(yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"])
    files = {path.stem for path in (ROOT / "roles" / role / "tasks").glob("*.yml")}
    assert entries <= files, f"{role}: entry points without a task file: {sorted(entries - files)}"
    unmarked = sorted(name for name in files - entries if not name.startswith("_"))
    assert not unmarked, f"{role}: task files that are no entry point and do not start with _: {unmarked}"
    marked = sorted(name for name in entries if name.startswith("_"))
    assert not marked, f"{role}: entry points named as internal: {marked}"


def test_one_word_for_one_state_and_one_variable_for_one_value():
    """The power of a cluster's parts is started or stopped, in every role; node_exporter's port is one value, which
    aws_infra opens and hands to monitoring through both inventories (this run's, and inventories/aws)."""
    from ansible_collections.graviton.llama_rpc.plugins.filter.input_problems import input_problems
    for role in ("rpc_master", "rpc_worker", "aws_infra"):
        specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
        option = specs["main"]["options"][f"{role}_power"] if f"{role}_power" in specs["main"]["options"] \
            else specs["power"]["options"][f"{role}_power"]
        assert option["default"] == "started" and set(option.get("choices", ["stopped", "started"])) == {"stopped", "started"}
    good = {"aws_infra_region": "eu-west-1", "aws_infra_cluster_name": "llama70b"}
    assert input_problems(dict(good, aws_infra_power="started"), "aws_infra_power") == []
    assert input_problems(dict(good, aws_infra_power="running"), "aws_infra_power")
    compose = yaml.safe_load((ROOT / "inventories" / "aws" / "aws_ec2.yml").read_text())["compose"]
    assert "graviton.llama_rpc/exporter_port" in compose["monitoring_exporter_port"]
    handed = (ROOT / "roles" / "aws_infra" / "tasks" / "_inventory.yml").read_text()
    assert handed.count("monitoring_exporter_port:") == 2  # the master and the workers
    assert "aws_infra_exporter_port" not in (ROOT / "roles" / "monitoring" / "defaults" / "main.yml").read_text()


def task_includes(node):
    """Every include_tasks/import_tasks target in a task list, blocks and rescues included."""
    return [target["file"] if isinstance(target, dict) else target
            for task in every_task(node)
            for target in (task.get("ansible.builtin.include_tasks"), task.get("ansible.builtin.import_tasks"))
            if target is not None]


@pytest.mark.parametrize("role", ROLES)
def test_every_included_task_file_exists(role):
    """An include whose name is templated (`_source_{{ llama_build_source }}.yml`) fails only on the host that takes
    that branch: each target, its template read as a wildcard, names at least one of the role's task files."""
    tasks = ROOT / "roles" / role / "tasks"
    missing = []
    for path in sorted(tasks.glob("*.yml")):
        for target in task_includes(yaml.safe_load(path.read_text()) or []):
            pattern = re.sub(r"\{\{.*?\}\}", "*", str(target))
            if not list(tasks.glob(pattern)):
                missing.append(f"{path.name} includes {target}")
    assert not missing, f"{role}: includes of no task file: {missing}"
