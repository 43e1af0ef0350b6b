# shellcheck shell=bash
# Shared helpers for the test bed scripts (sourced, not run).
# Everything the test bed keeps between runs (venv, base images' recipe, dockerd log, build caches)
# lives under LLAMA_RPC_CACHE so that a fresh clone reuses it.
LLAMA_RPC_CACHE="${LLAMA_RPC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/graviton-llama-rpc}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export LLAMA_RPC_CACHE REPO_ROOT

say() { printf '==> %s\n' "$*" >&2; }
die() { printf '\nERROR: %s\n' "$*" >&2; exit 1; }

# The Pythons each venv may use, in order of preference (tests/bed/venv.sh, tests/bed/constraints.sh): ansible-core
# 2.21 runs on 3.12 to 3.14 (Debian 13 and Ubuntu 24.04 have one; Debian 12 only through pyenv); ansible-core 2.17 on
# 3.10 to 3.12 (Debian 12's own python3 is 3.11).
# shellcheck disable=SC2034  # read by the scripts that source this file
TEST_PYTHONS=(3.13 3.12 3.14)
# shellcheck disable=SC2034
LOWEST_PYTHONS=(3.11 3.12 3.10)

# find_python 3.X...: prints the first of the given Python versions that runs here and can make a venv: python3.X on
# PATH, else a pyenv install of it (pyenv's shims answer only for its global version, so its installs are tried by
# path). Prints nothing and fails when none can.
find_python() {
  local version candidate
  for version in "$@"; do
    for candidate in "python$version" "${PYENV_ROOT:-$HOME/.pyenv}/versions/$version".*/bin/"python$version"; do
      if "$candidate" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        command -v "$candidate"
        return 0
      fi
    done
  done
  return 1
}

is_root() { [ "$(id -u)" -eq 0 ]; }
# This machine's speed now: the CPU-seconds of a fixed piece of work (the sum of 30 million integers in Python). The
# same machine is not always as fast (its neighbours, its clock): two runs' times compare only when this agrees.
fixed_work() { python3 -c 'import time; t = time.process_time(); sum(range(30_000_000)); print(f"{time.process_time() - t:.2f}")'; }

# The machine's CPU-seconds so far, every process's (containers' too): the busy time of /proc/stat's first line.
machine_cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '/^cpu / {print int(($2 + $3 + $4 + $7 + $8) / hz)}' /proc/stat; }

# A run's time as it would have been at this machine's best hour, when the fixed piece of work takes BEST_FIXED_WORK
# CPU-seconds (0.29 to 0.32 there; up to 1.1 at its worst): its wall time scaled by that over the figure measured
# around the run (the mean of before and after). The budget of make test is judged on it.
BEST_FIXED_WORK=0.30
normalized_seconds() {  # normalized_seconds WALL FIXED_BEFORE FIXED_AFTER
  awk -v wall="$1" -v a="$2" -v b="$3" -v best="$BEST_FIXED_WORK" 'BEGIN {print int(wall * best / ((a + b) / 2) + 0.5)}'
}

docker_answers() { timeout 10 docker info >/dev/null 2>&1; }

# apt-get update runs at most once per script run, and only when something must be installed.
_apt_updated=""
apt_install() {
  [ -n "$_apt_updated" ] || { say "apt-get update"; DEBIAN_FRONTEND=noninteractive apt-get update -qq; _apt_updated=1; }
  say "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# Containers run privileged where the host allows it (a normal workstation or CI runner). Where the
# capability bounding set is short (this project's VMs lack CAP_SYS_RESOURCE), --privileged fails with
# "unable to apply caps", and scenarios fall back to SYS_ADMIN (+NET_ADMIN) capabilities.
# Sets LLAMA_RPC_TEST_PRIVILEGED=true|false (once; needs the base image).
detect_privileged() {
  [ -n "${LLAMA_RPC_TEST_PRIVILEGED:-}" ] && return 0
  if docker run --rm --privileged llama-rpc-testbed:bookworm true >/dev/null 2>&1; then
    LLAMA_RPC_TEST_PRIVILEGED=true
  else
    LLAMA_RPC_TEST_PRIVILEGED=false
    say "this host cannot run privileged containers: using the SYS_ADMIN/NET_ADMIN capability workaround"
  fi
  export LLAMA_RPC_TEST_PRIVILEGED
}

# The whole test bed, for a script that runs containers: host packages and dockerd, the test venv (VENV), the base
# images, the environment (tests/bed/env.sh), the llama.cpp source, and whether containers may run privileged.
prepare_bed() {
  bash "$REPO_ROOT/tests/bed/host.sh"
  VENV=$(bash "$REPO_ROOT/tests/bed/venv.sh")
  bash "$REPO_ROOT/tests/bed/images.sh"
  # shellcheck source=tests/bed/env.sh
  . "$REPO_ROOT/tests/bed/env.sh"
  bash "$REPO_ROOT/tests/bed/sources.sh"
  bash "$REPO_ROOT/tests/bed/promtool.sh"
  detect_privileged
}
