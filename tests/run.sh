#!/usr/bin/env bash
# `make test`: prepares the test bed (host packages, dockerd, venv, base images), then runs every
# check: ansible-lint, ansible-test sanity, the collection build/install, the pytest unit and
# integration tests, and every Molecule scenario. A failed check does not stop the others; any failure makes the exit
# non-zero. The last line is the summary.
#   make test STAGES="lint units"       run only some checks
#   make test SCENARIOS="cluster"       run only some Molecule scenarios
set -uo pipefail
. "$(dirname "$0")/bed/lib.sh"
cd "$REPO_ROOT" || exit 1
started=$SECONDS

# --- test bed: any failure here is fatal, nothing else can run without it ---
bash tests/bed/host.sh || exit 1
VENV=$(bash tests/bed/venv.sh) || exit 1
bash tests/bed/images.sh || exit 1
. tests/bed/env.sh
bash tests/bed/sources.sh || exit 1
bash tests/bed/newest_amazon_aws.sh || exit 1

detect_privileged

# --- checks ---
passed=(); failed=()
run_stage() {  # run_stage NAME COMMAND...: records NAME as passed or failed, with its duration
  local name=$1 t0=$SECONDS; shift
  printf '\n==> [%s] %s\n' "$name" "$*"
  if "$@"; then passed+=("$name($((SECONDS - t0))s)"); else failed+=("$name($((SECONDS - t0))s)"); fi
}
wanted() { [ -z "${STAGES:-}" ] || [[ " $STAGES " == *" $1 "* ]]; }

# lint and sanity only read the checkout (sanity works on a copy) and each keeps one core busy: on two cores they run
# side by side, and lint's output is printed when both are done.
if wanted lint && wanted sanity; then
  lint_log=$(mktemp)
  lint_t0=$SECONDS
  bash tests/bed/lint.sh >"$lint_log" 2>&1 &
  lint_pid=$!
  run_stage sanity bash tests/bed/sanity.sh
  printf '\n==> [lint] bash tests/bed/lint.sh (beside sanity)\n'
  if wait "$lint_pid"; then passed+=("lint($((SECONDS - lint_t0))s)"); else failed+=("lint($((SECONDS - lint_t0))s)"); fi
  cat "$lint_log" && rm -f "$lint_log"
else
  wanted lint && run_stage lint bash tests/bed/lint.sh
  wanted sanity && run_stage sanity bash tests/bed/sanity.sh
fi
wanted build && run_stage build bash tests/bed/build_install.sh
wanted units && run_stage units python -m pytest -q tests/unit
# Real processes and containers driven by pytest: the Arm proof (cross-builds for aarch64, runs them
# under qemu-user) and the roles' bad-input checks.
scenarios=()
if wanted molecule; then
  read -r -a scenarios <<<"${SCENARIOS:-$(find molecule -mindepth 2 -maxdepth 2 -name molecule.yml -printf '%h\n' | xargs -rn1 basename | sort | xargs)}"
fi
# A scenario that starts no containers (aws_infra: moto on loopback) runs beside the integration tests, which leave
# a core idle while they wait on containers; its output is printed when both are done.
beside=()
if wanted integration; then
  for scenario in "${scenarios[@]}"; do [ "$scenario" = aws_infra ] && beside+=("$scenario"); done
fi
declare -A beside_pid beside_log
for scenario in "${beside[@]}"; do
  beside_log[$scenario]=$(mktemp)
  { t0=$SECONDS; molecule test -s "$scenario"; echo "$? $((SECONDS - t0))" >"${beside_log[$scenario]}.result"; } \
    >"${beside_log[$scenario]}" 2>&1 &
  beside_pid[$scenario]=$!
done
wanted integration && run_stage integration python -m pytest -q -rs -s --durations=12 tests/integration
for scenario in "${beside[@]}"; do
  wait "${beside_pid[$scenario]}"
  read -r rc took <"${beside_log[$scenario]}.result"
  printf '\n==> [molecule:%s] molecule test -s %s (beside the integration tests)\n' "$scenario" "$scenario"
  cat "${beside_log[$scenario]}" && rm -f "${beside_log[$scenario]}" "${beside_log[$scenario]}.result"
  if [ "$rc" -eq 0 ]; then passed+=("molecule:$scenario(${took}s)"); else failed+=("molecule:$scenario(${took}s)"); fi
done
for scenario in "${scenarios[@]}"; do
  [[ " ${beside[*]} " == *" $scenario "* ]] || run_stage "molecule:$scenario" molecule test -s "$scenario"
done

printf '\nmake test finished in %ss. passed: %s\n' "$((SECONDS - started))" "${passed[*]:-none}"
[ "${#failed[@]}" -eq 0 ] || printf 'FAILED: %s\n' "${failed[*]}"
printf 'summary: %d passed, %d failed\n' "${#passed[@]}" "${#failed[@]}"
[ "${#failed[@]}" -eq 0 ]
