# shellcheck shell=bash
# The environment every test-bed command runs in (sourced after lib.sh, with VENV set).
# The collection under test is found through ANSIBLE_COLLECTIONS_PATH: a link per checkout in the
# cache points at this working tree, so edits are tested as they are, without a build/install step.
_collections="$LLAMA_RPC_CACHE/collections/$(printf %s "$REPO_ROOT" | sha256sum | cut -c1-12)"
mkdir -p "$_collections/ansible_collections/graviton"
ln -sfn "$REPO_ROOT" "$_collections/ansible_collections/graviton/llama_rpc"

export PATH="$VENV/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$_collections"
export ANSIBLE_INJECT_FACT_VARS=False
export ANSIBLE_PIPELINING=True
# The cluster scenario's six hosts in one batch, not five and then one (docs/operations.md, Scaling).
export ANSIBLE_FORKS=10
export ANSIBLE_NOCOLOR=${ANSIBLE_NOCOLOR:-1}
export ANSIBLE_FORCE_COLOR=${ANSIBLE_FORCE_COLOR:-0}
export PY_COLORS=0
# Shared between scenarios and runs: compiler cache and built artifacts (mounted into containers).
export LLAMA_RPC_BUILD_CACHE="$LLAMA_RPC_CACHE/build"
mkdir -p "$LLAMA_RPC_BUILD_CACHE"

# The llama.cpp source the tests build, offline: the PyPI sdist of llama-cpp-python 0.3.36 carries
# llama.cpp build b11312 (commit 0c1e57098) under vendor/llama.cpp. Pinned by sha256.
export LLAMA_RPC_TEST_SDIST_PIN="llama-cpp-python==0.3.36"
export LLAMA_RPC_TEST_ARCHIVE="$LLAMA_RPC_CACHE/sources/llama_cpp_python-0.3.36.tar.gz"
export LLAMA_RPC_TEST_ARCHIVE_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
export LLAMA_RPC_TEST_ARCHIVE_SUBDIR=llama_cpp_python-0.3.36/vendor/llama.cpp
export LLAMA_RPC_TEST_ARCHIVE_COMMIT=0c1e57098
export LLAMA_RPC_TEST_LLAMA_VERSION=b11312
# promtool from the distribution's prometheus package (tests/bed/promtool.sh): the alert rules' unit tests.
export LLAMA_RPC_PROMTOOL="$LLAMA_RPC_CACHE/sources/promtool/promtool"


# The test bed's SSH key: the cluster scenario's hosts take its public half as an EC2 instance takes its key pair's,
# and tests/bed/ssh_config (the scenario's ssh -F) uses it, for the master and through it (ProxyJump) for the workers.
export LLAMA_RPC_TEST_SSH_KEY="$LLAMA_RPC_CACHE/ssh/id_ed25519"
if [ ! -f "$LLAMA_RPC_TEST_SSH_KEY" ] && command -v ssh-keygen >/dev/null; then  # tests/bed/host.sh installs it
  mkdir -p "${LLAMA_RPC_TEST_SSH_KEY%/*}" && chmod 0700 "${LLAMA_RPC_TEST_SSH_KEY%/*}"
  ssh-keygen -q -t ed25519 -N '' -C graviton-llama-rpc-test-bed -f "$LLAMA_RPC_TEST_SSH_KEY"
fi
