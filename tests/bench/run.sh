#!/usr/bin/env bash
# Runs one benchmark module inside the prepared test bed: tests/bench/run.sh MODULE [ARGS...]
# (for example tests.bench.build_once). Benchmarks print figures; they are not part of make test.
set -euo pipefail
. "$(dirname "$0")/../bed/lib.sh"
cd "$REPO_ROOT"
prepare_bed
# The benchmarks import the collection's Python (module_utils) as ansible_collections.graviton.llama_rpc.
export PYTHONPATH="$ANSIBLE_COLLECTIONS_PATH${PYTHONPATH:+:$PYTHONPATH}"
python -m "$@"
