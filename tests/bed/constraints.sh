#!/usr/bin/env bash
# Re-freezes requirements/constraints.txt: resolves requirements/test.txt in a scratch venv and writes
# every resolved package's version, so fresh machines install exactly what was tested.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
python3 -m venv "$scratch/venv"
"$scratch/venv/bin/pip" install -q --disable-pip-version-check -r "$REPO_ROOT/requirements/test.txt" 2>&1 | grep -v '^WARNING: Location' || true
{
  echo "# Every package of requirements/test.txt resolved, frozen so a fresh machine gets exactly what CI tested."
  echo "# Regenerate: make constraints (after changing a pin in controller.txt or test.txt)."
  "$scratch/venv/bin/pip" freeze --all | grep -v -E '^(pip|setuptools|wheel)=='
} >"$REPO_ROOT/requirements/constraints.txt"
say "wrote requirements/constraints.txt ($(grep -vc '^#' "$REPO_ROOT/requirements/constraints.txt") packages)"
