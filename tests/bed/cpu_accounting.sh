#!/usr/bin/env bash
# `make bench-test-cpu`: make test (or the STAGES and SCENARIOS given) under the kernel's process accounting, then where
# its CPU went: by command, and Ansible's part (its runs, its forks, the modules on the hosts). Every process that ends
# during the run is counted, containers' included; daemons that outlive it (dockerd, containerd) are not. Root only,
# and a kernel with CONFIG_BSD_PROCESS_ACCT. As long as make test (about 27 min warm).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT" || exit 1
[ "$(id -u)" = 0 ] || die "process accounting needs root (acct(2)); run make bench-test-cpu as root"
[ -e /proc/sys/kernel/acct ] || die "this kernel has no process accounting (CONFIG_BSD_PROCESS_ACCT)"
# A fixed piece of work (lib.sh), timed before and after the run, says whether two runs' CPU-seconds compare.
before=$(fixed_work)
records=$(mktemp /tmp/llama-rpc-acct.XXXXXX)
python3 -m tests.tools.process_accounting on "$records" || exit 1
trap 'python3 -m tests.tools.process_accounting off' EXIT
bash tests/run.sh
status=$?
python3 -m tests.tools.process_accounting off
trap - EXIT
python3 -m tests.tools.process_accounting report "$records"
rm -f "$records"
printf '\nthis machine: a fixed piece of work (sum of 30 million integers in Python) took %s CPU-s before the run, %s after\n' \
  "$before" "$(fixed_work)"
exit "$status"
