#!/usr/bin/env bash
# Re-freezes requirements/constraints.txt and requirements/constraints-lowest.txt: resolves requirements/test.txt and
# requirements/lowest.txt, each in a scratch venv on the Python its venv uses (tests/bed/venv.sh), and writes every
# resolved package's version, so fresh machines install exactly what was tested.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
freeze() {  # freeze PYTHON REQUIREMENTS CONSTRAINTS [NO-DEPS PACKAGE]
  local python=$1 requirements=$2 constraints=$3 extra=${4:-} venv
  venv=$(mktemp -d "$scratch/venv.XXXXXX")
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$REPO_ROOT/requirements/$requirements" 2>&1 | grep -v '^WARNING: Location' || true
  [ -z "$extra" ] || "$venv/bin/pip" install -q --disable-pip-version-check --no-deps "$extra" 2>&1 | grep -v '^WARNING: Location' || true
  {
    echo "# Every package of requirements/$requirements resolved, frozen so a fresh machine gets exactly what CI tested."
    echo "# Regenerate: make constraints (after changing a pin in a requirements file)."
    "$venv/bin/pip" freeze --all | grep -v -E '^(pip|setuptools|wheel)=='
  } >"$REPO_ROOT/requirements/$constraints"
  say "wrote requirements/$constraints ($(grep -vc '^#' "$REPO_ROOT/requirements/$constraints") packages)"
}
freeze "$(find_python "${TEST_PYTHONS[@]}")" test.txt constraints.txt
# The lowest venv's collections: the ansible package whose amazon.aws is galaxy.yml's lowest, without its ansible-core.
freeze "$(find_python "${LOWEST_PYTHONS[@]}")" lowest.txt constraints-lowest.txt ansible==12.3.0
