#!/usr/bin/env bash
# Fetches the amazon.aws that the newest `ansible` release bundles, once, for the aws_infra scenario. galaxy.yml's
# range runs from the amazon.aws of the test venv's ansible (10.x: ansible 12, the newest on Debian 12's Python 3.11)
# to that of the newest ansible (11.x: ansible 14 needs Python 3.12): the other scenarios run on the first, aws_infra
# on the second. The wheel comes from PyPI (Galaxy is unreachable), pinned by sha256 (tests/bed/env.sh); only its
# amazon.aws directory is kept.
set -euo pipefail
[ -n "${LLAMA_RPC_NEWEST_AMAZON_AWS:-}" ] || { echo "source tests/bed/env.sh first" >&2; exit 1; }
. "$(dirname "$0")/lib.sh"
if [ -f "$LLAMA_RPC_NEWEST_AMAZON_AWS/ansible_collections/amazon/aws/MANIFEST.json" ]; then
  say "amazon.aws of $LLAMA_RPC_NEWEST_ANSIBLE_PIN (cached)"
  exit 0
fi
mkdir -p "$(dirname "$LLAMA_RPC_NEWEST_AMAZON_AWS")"
work=$(mktemp -d "$(dirname "$LLAMA_RPC_NEWEST_AMAZON_AWS")/.download.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "downloading the $LLAMA_RPC_NEWEST_ANSIBLE_PIN wheel (51 MB) from PyPI, for its amazon.aws"
# --python-version: the wheel is for Python 3.12 and later; only its files are used here.
pip download --quiet --no-deps --only-binary :all: --python-version 3.12 --dest "$work" "$LLAMA_RPC_NEWEST_ANSIBLE_PIN" 2>&1 \
  | grep -v '^WARNING: Location' >&2 || true
wheel=$(find "$work" -maxdepth 1 -name '*.whl' | head -n1)
[ -n "$wheel" ] || die "pip did not download $LLAMA_RPC_NEWEST_ANSIBLE_PIN."
echo "$LLAMA_RPC_NEWEST_ANSIBLE_SHA256  $wheel" | sha256sum --check --status \
  || die "$(basename "$wheel") does not have sha256 $LLAMA_RPC_NEWEST_ANSIBLE_SHA256 (pin in tests/bed/env.sh)."
python3 - "$wheel" "$work/collections" <<'PY'
import sys
import zipfile

with zipfile.ZipFile(sys.argv[1]) as wheel:
    wheel.extractall(sys.argv[2], [name for name in wheel.namelist() if name.startswith("ansible_collections/amazon/aws/")])
PY
rm -rf "$LLAMA_RPC_NEWEST_AMAZON_AWS"
mv "$work/collections" "$LLAMA_RPC_NEWEST_AMAZON_AWS"
