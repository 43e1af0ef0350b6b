#!/usr/bin/env bash
# ansible-test sanity, offline. It needs the collection at .../ansible_collections/graviton/llama_rpc:
# the files git knows (tracked and untracked, not ignored) are copied there and tested.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# ansible-test builds one venv per sanity test and bootstraps pip in each with get-pip.py from a host
# that is unreachable: put our offline stand-in where it looks for its cached copy.
pip_version=$(python - <<'PY'
import inspect, re
from ansible_test._internal import python_requirements
print(re.search(r"pip='([0-9.]+)'", inspect.getsource(python_requirements)).group(1))
PY
)
cache="$HOME/.ansible/test/cache"
mkdir -p "$cache"
cp "$REPO_ROOT/tests/bed/get_pip.py" "$cache/get_pip_${pip_version//./_}.py"

# One tree per checkout and venv: two checkouts on one machine (CI beside a branch), or the lowest and newest
# ansible-core, must not share it.
dest="$LLAMA_RPC_CACHE/sanity/$(printf %s "$REPO_ROOT $(command -v ansible-test)" | sha256sum | cut -c1-12)/ansible_collections/graviton/llama_rpc"
rm -rf "$dest" && mkdir -p "$dest"
git -C "$REPO_ROOT" ls-files -z --cached --others --exclude-standard \
  | (cd "$REPO_ROOT" && xargs -0 tar -c --ignore-failed-read 2>/dev/null) | tar -x -C "$dest"
# The collections this one depends on (galaxy.yml) go beside it in the tree ansible-test works in:
# copies of those PyPI's ansible package installed.
site=$(python -c "import ansible_collections; print(list(ansible_collections.__path__)[0])")
dependencies=(amazon/aws)
for dependency in "${dependencies[@]}"; do
  rm -rf "$dest/../../$dependency" && mkdir -p "$dest/../../${dependency%/*}"
  cp -r "$site/$dependency" "$dest/../../$dependency"
done
cd "$dest"
# --requirements installs each test's pinned tools into ansible-test's own venvs (kept in ~/.ansible/test).
ansible-test sanity --local --requirements --python "$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')" --color no
