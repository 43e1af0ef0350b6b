#!/usr/bin/env bash
# `make test`: prepares the test bed (host packages, dockerd, venv, base images), then runs every
# check: ansible-lint, ansible-test sanity, the collection build/install, the pytest unit and
# integration tests, and every Molecule scenario, on the newest ansible; then lint, sanity and the unit tests again
# on the lowest ansible-core that requires_ansible admits (stage "lowest"). A failed check does not stop the others; any failure makes the exit
# non-zero. The last line is the summary.
#   make test STAGES="lint units"       run only some checks
#   make test SCENARIOS="cluster"       run only some Molecule scenarios
set -uo pipefail
. "$(dirname "$0")/bed/lib.sh"
cd "$REPO_ROOT" || exit 1
started=$SECONDS
speed_before=$(fixed_work)
cpu_before=$(machine_cpu_seconds)

# --- test bed: any failure here is fatal, nothing else can run without it ---
# `make check` (LLAMA_RPC_VENV_ONLY=1): the static checks and the unit tests, with a virtualenv and the llama.cpp source
# (PyPI) only: no root, no apt, no docker, no images.
if [ -n "${LLAMA_RPC_VENV_ONLY:-}" ]; then
  STAGES=${STAGES:-lint sanity units}
  for stage in $STAGES; do
    case "$stage" in lint|sanity|units) ;; *) die "make check runs lint, sanity and units only (STAGES has '$stage'): use make test." ;; esac
  done
else
  bash tests/bed/host.sh || exit 1
fi
VENV=$(bash tests/bed/venv.sh) || exit 1
[ -n "${LLAMA_RPC_VENV_ONLY:-}" ] || bash tests/bed/images.sh || exit 1
. tests/bed/env.sh
bash tests/bed/sources.sh || exit 1
bash tests/bed/promtool.sh || exit 1

[ -n "${LLAMA_RPC_VENV_ONLY:-}" ] || detect_privileged

# --- checks ---
passed=(); failed=()
run_stage() {  # run_stage NAME COMMAND...: records NAME as passed or failed, with its duration
  local name=$1 t0=$SECONDS; shift
  printf '\n==> [%s] %s\n' "$name" "$*"
  if "$@"; then passed+=("$name($((SECONDS - t0))s)"); else failed+=("$name($((SECONDS - t0))s)"); fi
}
wanted() { [ -z "${STAGES:-}" ] || [[ " $STAGES " == *" $1 "* ]]; }

# A check that shares no state with the one running beside it: started in the background, its output kept in a file
# and printed (with its own duration) by finish_beside, after the check in the foreground.
declare -a beside=()
declare -A beside_log=() beside_pid=()
start_beside() {  # start_beside NAME COMMAND...
  local name=$1 log; shift
  log=$(mktemp)
  { t0=$SECONDS; "$@"; echo "$? $((SECONDS - t0)) $*" >"$log.result"; } >"$log" 2>&1 &
  beside_pid[$name]=$!
  beside_log[$name]=$log
  beside+=("$name")
}
finish_beside() {  # waits for every check started beside, in order, and records each
  local name rc took command
  for name in "${beside[@]}"; do
    wait "${beside_pid[$name]}"
    rc=1 took=0 command=$name  # a check that died before writing its result failed
    [ -f "${beside_log[$name]}.result" ] && read -r rc took command <"${beside_log[$name]}.result"
    printf '\n==> [%s] %s (run beside the check above)\n' "$name" "$command"
    cat "${beside_log[$name]}" && rm -f "${beside_log[$name]}" "${beside_log[$name]}.result"
    if [ "$rc" -eq 0 ]; then passed+=("$name(${took}s)"); else failed+=("$name(${took}s)"); fi
  done
  beside=()
}

scenarios=()
if wanted molecule; then
  read -r -a scenarios <<<"${SCENARIOS:-$(find molecule -mindepth 2 -maxdepth 2 -name molecule.yml -printf '%h\n' | xargs -rn1 basename | sort | xargs)}"
fi
# The order below follows the machine's CPU, sampled every 3 s during a warm run with every check one after the other
# (1,273 s): the integration tests, the cluster scenario up to its verify and the aws_infra scenario each kept both
# cores busy, while the cluster scenario's verify (8 of its 15 minutes: services that must fail, recover, time out)
# kept one busy and left the other idle. So the scenarios start first, the one that starts no containers (aws_infra:
# moto on loopback) beside the cluster; and the integration tests start when the cluster scenario's verify starts
# (molecule/cluster/tests/conftest.py creates $LLAMA_RPC_VERIFY_STARTED), in the core it leaves idle, whether aws_infra
# has ended or not. The checks on the lowest ansible-core (CPU only: lint, sanity, unit tests) start at once too:
# the cores are partly idle before the verify (the cluster's converge and idempotence: one playbook, waiting on its
# hosts), and every check but the cluster's and integration:master is niced, so they only fill what those leave.
# None of them shares a container, network, port or cache directory with the scenario.
# The cluster scenario is the run's longest path: the checks started beside it get the cores it leaves (nice on this
# machine, lower CPU shares for the containers they start: tests/tools/containers.py), so none of them slows it.
beside_the_cluster() { nice -n 10 env LLAMA_RPC_TEST_CPU_SHARES=256 "$@"; }
export LLAMA_RPC_VERIFY_STARTED
LLAMA_RPC_VERIFY_STARTED=$(mktemp -u)
# The llama_build role's run that gives the integration tests this machine's build: once, for both processes
# (tests/tools/llama_cpp.py, role_build).
export LLAMA_RPC_ROLE_BUILD_DONE
LLAMA_RPC_ROLE_BUILD_DONE=$(mktemp -u)
# aws_infra (moto on loopback, no containers) yields to the cluster scenario too: its own path is much shorter.
container_scenarios=()
for scenario in "${scenarios[@]}"; do
  if [ "$scenario" = aws_infra ] && [ "${#scenarios[@]}" -gt 1 ]; then
    start_beside "molecule:$scenario" beside_the_cluster molecule test -s "$scenario"
  else
    start_beside "molecule:$scenario" molecule test -s "$scenario"
    container_scenarios+=("molecule:$scenario")
  fi
done
# lint, sanity, the unit tests and the collection build only read the checkout (sanity works on a copy, the build
# installs into a directory of its own; pytest's caches are ignored files), and each keeps one core busy: they start
# beside the scenarios, in the cores the cluster leaves (its create, prepare and first runs wait on its hosts).
wanted lint && start_beside lint beside_the_cluster bash tests/bed/lint.sh
wanted units && start_beside units beside_the_cluster python -m pytest -q tests/unit
wanted sanity && start_beside sanity beside_the_cluster bash tests/bed/sanity.sh
wanted build && start_beside build beside_the_cluster bash tests/bed/build_install.sh
scenario_running() {  # true while a scenario started above runs
  local name
  for name in "${container_scenarios[@]}"; do kill -0 "${beside_pid[$name]}" 2>/dev/null && return 0; done
  return 1
}
wanted lowest && wanted integration && start_beside lowest beside_the_cluster bash tests/bed/lowest.sh
if wanted integration; then
  while [ ! -e "$LLAMA_RPC_VERIFY_STARTED" ] && scenario_running; do sleep 2; done
fi
# Real processes and containers driven by pytest: the Arm proof (cross-builds for aarch64, runs them
# under qemu-user) and every role's bad-input cases (tests/integration/bad_input/).
# The integration tests in two processes side by side: they wait on ansible and docker far more than they compute.
# integration:master holds the tests on the smallest cluster (the master's update, rollback and restart tests, the
# gateway and bench alone, which share that cluster): from the cluster's verify on it is the run's longest path (its
# deploy, then playbook after playbook on one cluster), so it runs at the cluster scenario's priority, and the other
# process (the refusals a host or AWS answers, the tunnel's life, the tests on llama.cpp's builds and the Arm proof)
# yields to both. They share no host, network or build directory (the x86 build: one role run for both,
# tests/tools/llama_cpp.role_build).
# The fetch's progress test stays here too: its first run is cut after 3 s, and niced under a loaded machine it can land
# no whole range by then, which leaves it nothing to resume (its assertion, not the fetch, depends on that timing).
integration_master=(tests/integration/test_rpc_master_alone.py tests/integration/test_gateway_alone.py
                    tests/integration/test_bench_alone.py tests/integration/test_model_fetch_progress.py)
if wanted integration; then
  start_beside integration:master python -m pytest -q -rs -s --durations=0 --durations-min=10 "${integration_master[@]}"
  run_stage integration beside_the_cluster python -m pytest -q -rs -s --durations=0 --durations-min=10 "${integration_master[@]/#/--ignore=}" tests/integration
fi
wanted lowest && ! wanted integration && run_stage lowest bash tests/bed/lowest.sh
finish_beside
rm -f "$LLAMA_RPC_VERIFY_STARTED" "$LLAMA_RPC_ROLE_BUILD_DONE"

wall=$((SECONDS - started))
printf '\nmake %s finished in %ss. passed: %s\n' "$([ -n "${LLAMA_RPC_VENV_ONLY:-}" ] && echo check || echo test)" \
  "$wall" "${passed[*]:-none}"
# Wall time depends on the machine's speed, which moves by a factor of three over the day: the run is judged on its time
# at the machine's best hour (a fixed piece of work: BEST_FIXED_WORK CPU-s there), which the last lines say.
speed_after=$(fixed_work)
normalized=$(normalized_seconds "$wall" "$speed_before" "$speed_after")
printf 'this machine: a fixed piece of work took %s CPU-s before the run, %s after (%s at its best hour); the run used %s CPU-s\n' \
  "$speed_before" "$speed_after" "$BEST_FIXED_WORK" "$(( $(machine_cpu_seconds) - cpu_before ))"
printf 'time: %s s wall (%s min), %s s (%s min) at the best hour; budget there: 20 min warm, 45 cold\n' "$wall" \
  "$(awk -v s="$wall" 'BEGIN {printf "%.1f", s / 60}')" "$normalized" "$(awk -v s="$normalized" 'BEGIN {printf "%.1f", s / 60}')"
[ "${#failed[@]}" -eq 0 ] || printf 'FAILED: %s\n' "${failed[*]}"
printf 'summary: %d passed, %d failed\n' "${#passed[@]}" "${#failed[@]}"
[ "${#failed[@]}" -eq 0 ]
