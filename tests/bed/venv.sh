#!/usr/bin/env bash
# Ensures the test virtualenv and prints its path. It lives in the cache, keyed by the requirements'
# hash: a fresh clone with the same pins reuses it, a changed pin gets a new one. A venv whose install
# did not finish has no .complete marker and is made again.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

req="$REPO_ROOT/requirements"
hash=$(cat "$req/controller.txt" "$req/test.txt" "$req/constraints.txt" | sha256sum | cut -c1-12)
venv="$LLAMA_RPC_CACHE/venv-$(python3 -c 'import sys; print("py%d%d" % sys.version_info[:2])')-$hash"

if [ ! -e "$venv/.complete" ]; then
  rm -rf "$venv"
  mkdir -p "$LLAMA_RPC_CACHE"
  say "creating the test virtualenv $venv (about 2 minutes the first time)"
  python3 -m venv "$venv" || die "python3 -m venv failed: install python3-venv (apt-get install python3-venv)."
  log="$venv/install.log"
  if ! "$venv/bin/pip" install --disable-pip-version-check -r "$req/test.txt" -c "$req/constraints.txt" >"$log" 2>&1; then
    grep -v '^WARNING: Location' "$log" | tail -n 25 >&2
    die "pip could not install requirements/test.txt (log above, full log: $log)."
  fi
  touch "$venv/.complete"
  # Venvs of other requirement sets that no run has used for a day are removed. Not sooner: another
  # checkout on this machine (a CI run beside a developer's branch) may be using one right now.
  find "$LLAMA_RPC_CACHE" -maxdepth 1 -name "$(basename "${venv%-*}")-*" ! -path "$venv" \
    ! -newermt '-1 day' -exec rm -rf {} + || true
fi
touch "$venv"  # marks the venv as in use (see the pruning above)
echo "$venv"
