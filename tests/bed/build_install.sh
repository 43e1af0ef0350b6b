#!/usr/bin/env bash
# The collection as users get it: `ansible-galaxy collection build`, then install that tarball offline
# into an empty path, and check that its content is there and the build-ignored files are not.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
ansible-galaxy collection build "$REPO_ROOT" --output-path "$work" --force
tarball=$(ls "$work"/graviton-llama_rpc-*.tar.gz)
# Dependencies (amazon.aws) are satisfied from the ones PyPI's ansible package installed.
site=$(python3 -c "import ansible_collections, os; print(os.path.dirname(list(ansible_collections.__path__)[0]))")
ANSIBLE_COLLECTIONS_PATH="$work/installed:$site" ansible-galaxy collection install --offline -p "$work/installed" "$tarball"
installed="$work/installed/ansible_collections/graviton/llama_rpc"
for must in MANIFEST.json FILES.json README.md LICENSE meta/runtime.yml; do
  [ -e "$installed/$must" ] || { echo "installed collection lacks $must" >&2; exit 1; }
done
for mustnot in molecule tests requirements .ci Makefile; do
  [ ! -e "$installed/$mustnot" ] || { echo "installed collection carries $mustnot (add it to build_ignore)" >&2; exit 1; }
done
ANSIBLE_COLLECTIONS_PATH="$work/installed" ansible-galaxy collection list graviton.llama_rpc
# Users run the playbooks by name from the installed collection, and read the roles' variables with ansible-doc.
cd "$work"
export ANSIBLE_COLLECTIONS_PATH="$work/installed:$site"
playbooks=("$REPO_ROOT"/playbooks/*.yml); roles=("$REPO_ROOT"/roles/*/)
for playbook in "${playbooks[@]}"; do
  name=graviton.llama_rpc.$(basename "$playbook" .yml)
  out=$(ansible-playbook --syntax-check "$name" 2>&1) \
    || { printf '%s\nansible-playbook %s fails its syntax check from the installed collection\n' "$out" "$name" >&2; exit 1; }
done
for role in "${roles[@]}"; do
  name=graviton.llama_rpc.$(basename "$role")
  doc=$(ansible-doc -t role "$name" 2>&1) || true
  # The roles run as a whole (main); common, the tasks they share, only through its own entry points.
  entry=main; [[ $(basename "$role") == common ]] && entry=""
  [[ $doc == *"ENTRY POINT: "*"$entry"* ]] || { printf '%s\nansible-doc -t role %s shows no %s entry point\n' "$doc" "$name" "${entry:-documented}" >&2; exit 1; }
done
echo "playbooks by name: ${#playbooks[@]}; roles documented by ansible-doc: ${#roles[@]}"
echo "built and installed offline: $(basename "$tarball"), $(du -h "$tarball" | cut -f1)"
