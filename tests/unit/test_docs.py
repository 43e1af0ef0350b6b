"""The README and the docs, checked as code: every link resolves (a file, and a heading for an anchor), every variable
they name exists in a role's argument spec, every command they show is one the collection has (a make target, a
playbook, a plugin). No page refers to the history of the work: that is the changelog's."""

import re
import shlex
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "playbooks" / "README.md", ROOT / "inventories" / "README.md",
                *(ROOT / "docs").glob("*.md"), *(ROOT / "roles").glob("*/README.md")])
USER_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
ROLES = sorted(path.parent.parent.name for path in (ROOT / "roles").glob("*/meta/argument_specs.yml"))
VARIABLE = re.compile(r"(?<![\w./-])(?:" + "|".join(role for role in ROLES if not role.startswith("_")) + r")_[a-z0-9_]*[a-z0-9]\b")


def relative(page):
    return str(page.relative_to(ROOT))


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page):
    text = FENCE.sub("", page.read_text())
    return {slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def prose(page):
    """The page without its fenced blocks (which hold sample output and other people's files)."""
    return FENCE.sub("", page.read_text())


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_every_link_resolves(page):
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: not checked offline
            continue
        path, anchor = target.partition("#")[::2]
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading with that anchor in {relative(resolved)}")
    assert not broken, f"{relative(page)}: {broken}"


def argument_spec_options():
    names = set()
    for role in ROLES:
        specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
        for entry in specs.values():
            names.update((entry.get("options") or {}).keys())
    return names


def published_facts():
    """The facts the roles set for other roles and plays (set_fact names without the internal leading underscore)."""
    names = set()
    for tasks in (ROOT / "roles").glob("*/tasks/*.yml"):
        for task in yaml.safe_load(tasks.read_text()) or []:
            for inner in [task] + task.get("block", []) + task.get("always", []) + task.get("rescue", []):
                names.update(name for name in (inner.get("ansible.builtin.set_fact") or {}) if not name.startswith("_"))
    return names


@pytest.mark.parametrize("page", USER_PAGES, ids=relative)
def test_every_variable_named_exists_in_an_argument_spec(page):
    """Every role variable a page names is in an argument spec, or is a fact a role publishes."""
    known = argument_spec_options() | published_facts()
    named = set(VARIABLE.findall(page.read_text())) - set(plugins())  # bench_report is a module
    assert named, f"{relative(page)} names no variable: the pattern is wrong"
    assert not sorted(named - known), f"{relative(page)} names variables no role has: {sorted(named - known)}"


def make_targets():
    return set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


def plugins():
    found = {}
    for kind in ("modules", "filter", "lookup", "inventory"):
        for path in (ROOT / "plugins" / kind).glob("*.py"):
            found.setdefault(path.stem, kind)
    return found


def commands(page):
    """Each shell command the page shows: lines of its sh blocks, and inline code that starts with a command."""
    shown = []
    for block in re.finditer(r"^```(?:sh|bash|console)\n(.*?)^```", page.read_text(), re.M | re.S):
        joined = block.group(1).replace("\\\n", " ")
        shown += [line.split("#")[0].strip() for line in joined.splitlines() if line.strip()]
    shown += re.findall(r"`((?:make|ansible-playbook|ansible-doc) [^`]+)`", prose(page))
    return shown


@pytest.mark.parametrize("page", USER_PAGES, ids=relative)
def test_every_command_shown_is_one_the_collection_has(page):
    targets, playbooks, known_plugins = make_targets(), {p.stem for p in (ROOT / "playbooks").glob("*.yml")}, plugins()
    wrong = []
    for command in commands(page):
        for part in (part.strip() for part in re.split(r"&&|;|\|\|", command)):
            words = shlex.split(part) if part else []
            if words[:1] == ["make"]:  # make lint|sanity|units: each of them
                wrong += [f"{part}: no make target {target}" for word in words[1:] if "=" not in word
                          for target in word.split("|") if target not in targets]
            elif words[:1] == ["ansible-playbook"]:
                named = [word for word in words if word.startswith(("playbooks/", "graviton.llama_rpc."))]
                stems = [Path(word).stem if word.startswith("playbooks/") else word.split(".")[-1] for word in named]
                wrong += [f"{part}: no playbook {stem}" for stem in stems if stem not in playbooks]
                wrong += [] if named else [f"{part}: names no playbook"]
            elif words[:1] == ["ansible-doc"]:
                wrong += [f"{part}: no plugin {word}" for word in words
                          if word.startswith("graviton.llama_rpc.") and word.split(".")[-1] not in known_plugins]
    assert not wrong, f"{relative(page)}: {wrong}"


def test_the_readme_shows_commands_the_check_reads():
    """The command check above reads the README's commands (a pattern that finds none would pass in silence)."""
    shown = commands(ROOT / "README.md")
    assert any(command.startswith("ansible-playbook graviton.llama_rpc.site") for command in shown), shown
    assert any(command.startswith("make demo") for command in shown), shown


@pytest.mark.parametrize("page", USER_PAGES, ids=relative)
def test_no_page_tells_the_history_of_the_work(page):
    text = re.sub(r"https?://[^\s)]+", "", page.read_text())  # a source's address may carry its date
    history = re.findall(r"\bissues? \d+|\b20\d\d-\d\d-\d\d\b|\bcommit [0-9a-f]{7,}|\bat [0-9a-f]{7}\b"
                         r"|\b(?:this|that|the next|the last|last|the previous|an earlier) (?:stop|session)\b"
                         r"|\bthe (?:stop|session) (?:after|before)\b", text, re.I)
    assert not history, f"{relative(page)}: {history} (the changelog holds history)"


def test_the_readme_is_read_in_five_minutes():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 220


def test_the_ci_example_keeps_host_key_checking_on():
    example = (ROOT / "examples" / "github-actions" / "deploy-llama-cluster.yml").read_text()
    assert not re.search(r"HOST_KEY_CHECKING\s*:\s*[\"']?(false|no|0)", example, re.I)


def test_the_architecture_names_every_role_daemon_and_plugin():
    """docs/architecture.md covers the tree: every role, every daemon a role installs beside its services (a program of
    its files/ with a unit template of the same name), every plugin, and every llama.cpp patch."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    roles = [path.name for path in (ROOT / "roles").iterdir() if path.is_dir()]
    daemons = [path.stem for path in (ROOT / "roles").glob("*/files/*.py")
               if list(path.parent.parent.glob("templates/%s*.service.j2" % path.stem))]
    plugins = [path.stem for kind in ("modules", "filter", "lookup") for path in (ROOT / "plugins" / kind).glob("*.py")
               if path.stem != "__init__"]
    patches = [path.stem for path in (ROOT / "roles" / "llama_build" / "files" / "patches").glob("*/*.patch")]
    missing = [name for name in roles + daemons + plugins + patches if "`%s" % name not in page]
    assert len(daemons) >= 6 and not missing, "docs/architecture.md does not name: %s" % ", ".join(sorted(missing))
