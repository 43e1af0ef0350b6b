#!/usr/bin/env bash
# `make bench-test-parts`: each part of `make test` alone, one after the other, with its wall time and the CPU it kept
# busy (the whole machine's, from /proc/stat: containers and daemons included), then a table. Side by side in
# `make test`, the parts share two cores: a part's idle share is what the others can use, and the sum of the parts'
# CPU-seconds over the cores is the least a whole run can take (docs/contributing.md). Each part's figures include
# the test bed's own check before it (host, venv, images, source: some 10 s warm). About 40 minutes warm.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT" || exit 1
cores=$(nproc)
busy_ticks() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }  # user nice system irq softirq steal
ticks_per_second=$(getconf CLK_TCK)
rows=() status=0
part() {  # part NAME STAGES [SCENARIOS]: make test with those stages alone
  local name=$1 t0 b0 wall cpu log
  log=$(mktemp)
  t0=$SECONDS b0=$(busy_ticks)
  if STAGES=$2 SCENARIOS=${3:-} bash tests/run.sh >"$log" 2>&1; then
    wall=$((SECONDS - t0)) cpu=$((($(busy_ticks) - b0) / ticks_per_second))
    rows+=("$(printf '| %s | %s s | %s | %s%% |' "$name" "$wall" "$cpu" "$((100 - 100 * cpu / (cores * (wall > 0 ? wall : 1))))")")
    say "$name: ${wall} s, ${cpu} CPU-s"
  else
    status=1
    rows+=("| $name | failed | | |")
    tail -20 "$log" >&2
  fi
  rm -f "$log"
}
part "lint, units, sanity, build" "lint units sanity build"
part "the aws_infra scenario" molecule aws_infra
part "the lowest ansible-core's checks" lowest
part "the integration tests (both halves side by side)" integration
part "the cluster scenario" molecule cluster
printf '\n%s cores\n| part, alone | wall | CPU-seconds | cores idle |\n|---|---|---|---|\n' "$cores"
printf '%s\n' "${rows[@]}"
exit "$status"
