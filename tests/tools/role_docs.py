"""The variable tables in the role READMEs, rendered from each role's meta/argument_specs.yml.

The argument specs are the one source of a role's variables (they validate input before any task runs),
so the READMEs never list a variable, type or default by hand. `make docs` rewrites the generated
section of every role README; `python -m tests.tools.role_docs --check` (run by the unit tests) fails
when one is stale or missing.
"""

import argparse
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BEGIN = "<!-- BEGIN variables: generated from meta/argument_specs.yml by `make docs`; do not edit by hand -->"
END = "<!-- END variables -->"
SECTION = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)

# Ansible's documentation markup, as Markdown: O(option), V(value), C(code), M(module), E(env), P(plugin), I(italic), B(bold), U(url)
MARKUP = [
    (re.compile(r"[OVCMEP]\(([^()]*(?:\([^()]*\)[^()]*)*)\)"), r"`\1`"),
    (re.compile(r"I\(([^()]*)\)"), r"*\1*"),
    (re.compile(r"B\(([^()]*)\)"), r"**\1**"),
    (re.compile(r"U\(([^()]*)\)"), r"<\1>"),
]


def markdown(text):
    """One table cell from an argument spec's description (a string or a list of paragraphs)."""
    text = " ".join(text) if isinstance(text, list) else str(text or "")
    for pattern, replacement in MARKUP:
        text = pattern.sub(replacement, text)
    return " ".join(text.split()).replace("|", "\\|")


def default_cell(option):
    if option.get("required"):
        return "required"
    if "default" not in option or option["default"] is None:
        return "unset"
    return "`" + json.dumps(option["default"]).replace("|", "\\|") + "`"


def type_cell(option):
    kind = option.get("type", "str")
    if kind == "list" and option.get("elements"):
        kind = f"list of {option['elements']}"
    if option.get("choices"):
        kind += ": " + ", ".join(f"`{choice}`" for choice in option["choices"])
    return kind


def options_table(options):
    rows = ["| Variable | Type | Default | Description |", "|---|---|---|---|"]
    for name, option in options.items():
        secret = " Secret: never logged (`no_log`)." if option.get("no_log") else ""
        rows.append(f"| `{name}` | {type_cell(option)} | {default_cell(option)} | {markdown(option.get('description'))}{secret} |")
    return rows


def render(role_dir):
    """The generated section of one role's README: each entry point and its variables."""
    specs = yaml.safe_load((role_dir / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    lines = [BEGIN, ""]
    main_options = specs.get("main", {}).get("options") or {}
    for entry_point, spec in specs.items():
        options = spec.get("options") or {}
        call = "the role" if entry_point == "main" else f"`tasks_from: {entry_point}`"
        lines.append(f"**Entry point `{entry_point}`** ({call}): {markdown(spec.get('short_description'))}")
        lines.append("")
        if entry_point != "main" and options and all(options[name] == main_options.get(name) for name in options):
            same = "the same variables as `main`" if options == main_options else \
                "these variables of `main`: " + ", ".join(f"`{name}`" for name in options)
            lines.append(f"It takes {same}.")
        elif options:
            lines.extend(options_table(options))
        else:
            lines.append("It takes no variables.")
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def roles():
    return sorted(path for path in (ROOT / "roles").iterdir() if (path / "meta" / "argument_specs.yml").is_file())


def stale_readmes():
    """(role, reason) for every role README that is missing, lacks the generated section, or is out of date."""
    problems = []
    for role_dir in roles():
        readme = role_dir / "README.md"
        if not readme.is_file():
            problems.append((role_dir.name, "has no README.md"))
            continue
        text = readme.read_text()
        found = SECTION.search(text)
        if len(SECTION.findall(text)) > 1:
            problems.append((role_dir.name, "README.md carries the generated variables section %d times: keep one"
                             % len(SECTION.findall(text))))
        elif not found:
            problems.append((role_dir.name, f"README.md lacks the generated variables section ({BEGIN} ... {END})"))
        elif found.group(0) != render(role_dir):
            problems.append((role_dir.name, "README.md's variables differ from meta/argument_specs.yml"))
    return problems


def write_readmes():
    for role_dir in roles():
        readme = role_dir / "README.md"
        text = readme.read_text() if readme.is_file() else f"# graviton.llama_rpc.{role_dir.name}\n"
        if SECTION.search(text):
            text = SECTION.sub(lambda _: render(role_dir), text)
        else:
            text = text.rstrip("\n") + "\n\n## Variables\n\n" + render(role_dir) + "\n"
        readme.write_text(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale READMEs (exit 1 when any is)")
    if parser.parse_args().check:
        problems = stale_readmes()
        for role, reason in problems:
            print(f"roles/{role}: {reason}: run `make docs`", file=sys.stderr)
        return 1 if problems else 0
    write_readmes()
    return 0


if __name__ == "__main__":
    sys.exit(main())
