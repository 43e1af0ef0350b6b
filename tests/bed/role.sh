#!/usr/bin/env bash
# `make role ROLE=<name>`: one role's own checks, for a change to that role: the unit tests (every input rule is one),
# the role's refusals end to end on a container, and its own scenario where it has one. The checks across roles (a
# cluster that serves) are the cluster scenario's: `make molecule SCENARIOS=cluster`.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
role=${1:-}
# The role's own tests beyond its refusals (tests/integration/bad_input/test_<role>.py), and its Molecule scenario. The
# roles of the master's side (rpc_master, gateway, bench) run on the smallest cluster (tests/integration/conftest.py).
declare -A own=(
  [aws_infra]=""
  [llama_build]="tests/integration/test_git_source.py tests/integration/test_arm_cross.py"
  [rpc_tunnel]="tests/integration/test_rpc_tunnel.py"
  [rpc_worker]="tests/integration/test_rpc_probe.py tests/integration/test_rpc_worker_alone.py"
  [rpc_master]="tests/integration/test_rpc_master_alone.py tests/integration/test_model_fetch_progress.py tests/integration/test_plan_against_llama_cpp.py"
  [gateway]="tests/integration/test_gateway_alone.py"
  [bench]="tests/integration/test_bench_alone.py"
  [monitoring]=""
)
declare -A scenario=([aws_infra]=aws_infra)
if [ -z "$role" ] || [ -z "${own[$role]+set}" ]; then
  die "make role needs ROLE, one of: $(printf '%s\n' "${!own[@]}" | sort | xargs) (got '${role}')."
fi

prepare_bed

started=$SECONDS
python -m pytest -q tests/unit
# shellcheck disable=SC2086  # the list of files is split on purpose
python -m pytest -q -rs "tests/integration/bad_input/test_$role.py" ${own[$role]}
[ -z "${scenario[$role]:-}" ] || molecule test -s "${scenario[$role]}"
say "make role ROLE=$role finished in $((SECONDS - started)) s"
[ -n "${scenario[$role]:-}" ] || say "$role among the other roles, on two clusters over SSH: make molecule SCENARIOS=cluster (about 16 min)."
