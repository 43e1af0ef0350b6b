#!/usr/bin/env bash
# Ensures a test virtualenv and prints its path. It lives in the cache, keyed by the requirements' hash: a fresh
# clone with the same pins reuses it, a changed pin gets a new one. A venv whose install did not finish has no
# .complete marker and is made again.
#   venv.sh          the test venv: the newest ansible release (requirements/test.txt), everything runs in it
#   venv.sh lowest   the lowest ansible-core that requires_ansible admits (requirements/lowest.txt): lint, sanity
#                    and unit tests run in it too (tests/bed/lowest.sh), so the range we claim is the range we test
set -euo pipefail
. "$(dirname "$0")/lib.sh"

req="$REPO_ROOT/requirements"
flavour=${1:-test}
case "$flavour" in
  test)
    files=("$req/controller.txt" "$req/test.txt" "$req/constraints.txt")
    python=$(find_python "${TEST_PYTHONS[@]}") \
      || die "the newest ansible-core (requirements/controller.txt) needs one of Python ${TEST_PYTHONS[*]} on the controller; none runs here. Install one (apt-get install python3.13-venv on Debian 13, python3.12-venv on Ubuntu 24.04, or pyenv install 3.13) and run make test again."
    ;;
  lowest)
    files=("$req/lowest.txt" "$req/constraints-lowest.txt")
    python=$(find_python "${LOWEST_PYTHONS[@]}") \
      || die "ansible-core 2.17 (requirements/lowest.txt) needs one of Python ${LOWEST_PYTHONS[*]}; none runs here. Install python3-venv (Debian 12) or pyenv install 3.11."
    ;;
  *) die "venv.sh: unknown venv '$flavour' (test or lowest)" ;;
esac
hash=$(cat "${files[@]}" | sha256sum | cut -c1-12)
prefix=$([ "$flavour" = test ] && echo venv || echo "venv-$flavour")
venv="$LLAMA_RPC_CACHE/$prefix-$("$python" -c 'import sys; print("py%d%d" % sys.version_info[:2])')-$hash"

if [ ! -e "$venv/.complete" ]; then
  rm -rf "$venv"
  mkdir -p "$LLAMA_RPC_CACHE"
  say "creating the $flavour virtualenv $venv with $python (about 2 minutes the first time)"
  "$python" -m venv "$venv" || die "$python -m venv failed: install its venv module (apt-get install python3-venv)."
  log="$venv/install.log"
  if ! "$venv/bin/pip" install --disable-pip-version-check -r "${files[-2]}" -c "${files[-1]}" >"$log" 2>&1; then
    grep -v '^WARNING: Location' "$log" | tail -n 25 >&2
    die "pip could not install ${files[-2]#"$REPO_ROOT/"} (log above, full log: $log)."
  fi
  if [ "$flavour" = lowest ]; then
    # The collections of the ansible package whose amazon.aws is galaxy.yml's lowest (10.x in ansible 12.3.0), without
    # its ansible-core: only its files are used, beside ansible-core 2.17.
    if ! "$venv/bin/pip" install --disable-pip-version-check --no-deps "$(grep -E '^ansible==' "$req/constraints-lowest.txt")" \
      >>"$log" 2>&1; then
      grep -v '^WARNING: Location' "$log" | tail -n 25 >&2
      die "pip could not install the ansible package of requirements/constraints-lowest.txt (full log: $log)."
    fi
  fi
  touch "$venv/.complete"
  # Venvs of other requirement sets that no run has used for a day are removed. Not sooner: another
  # checkout on this machine (a CI run beside a developer's branch) may be using one right now.
  find "$LLAMA_RPC_CACHE" -maxdepth 1 -name "$prefix-py*-*" ! -path "$venv" \
    ! -newermt '-1 day' -exec rm -rf {} + || true
fi
touch "$venv"  # marks the venv as in use (see the pruning above)
echo "$venv"
