#!/usr/bin/env bash
# The lint stage: ansible-lint (production profile) on the collection, and the example CI workflow checked
# against GitHub's workflow schema (check-jsonschema, vendored, offline) and audited by zizmor (offline).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
ansible-lint
check-jsonschema --builtin-schema vendor.github-workflows examples/github-actions/*.yml
zizmor --offline --no-progress examples/github-actions/*.yml
