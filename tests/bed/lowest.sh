#!/usr/bin/env bash
# The lowest ansible-core that requires_ansible admits (requirements/lowest.txt), in its own venv: ansible-lint, ansible-test
# sanity and the unit tests, as the test venv runs them on the newest. The Molecule scenarios run on the newest only.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
VENV=$(bash tests/bed/venv.sh lowest)
. tests/bed/env.sh
say "on ansible-core $(python -c "from ansible.release import __version__; print(__version__)"), $(python --version)"
failed=()
ansible-lint || failed+=(ansible-lint)
bash tests/bed/sanity.sh || failed+=(sanity)
python -m pytest -q tests/unit || failed+=(units)
[ "${#failed[@]}" -eq 0 ] || die "on the lowest ansible-core, failed: ${failed[*]}"
