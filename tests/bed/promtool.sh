#!/usr/bin/env bash
# Fetches promtool, which checks the monitoring role's alert rules and scrape configuration in the unit tests, into the
# cache, once: from the distribution's own prometheus package (the one the role installs), unpacked, not installed, so
# no Prometheus runs on this machine and no root is needed. apt is the client: the package mirror is reachable.
set -euo pipefail
[ -n "${LLAMA_RPC_PROMTOOL:-}" ] || { echo "source tests/bed/env.sh first" >&2; exit 1; }
. "$(dirname "$0")/lib.sh"
if [ -x "$LLAMA_RPC_PROMTOOL" ] && "$LLAMA_RPC_PROMTOOL" --version >/dev/null 2>&1; then
  say "promtool: $("$LLAMA_RPC_PROMTOOL" --version 2>&1 | head -1) (cached)"
  exit 0
fi
command -v apt-get >/dev/null || die "promtool comes from the distribution's prometheus package: this needs Debian or Ubuntu (apt-get)."
partial=$(mktemp -d)
trap 'rm -rf "$partial"' EXIT
say "downloading the distribution's prometheus package for its promtool"
(cd "$partial" && apt-get download prometheus 2>&1 | grep -v 'unsandboxed' >&2) \
  || die "apt-get download prometheus failed: run apt-get update (as root) and try again."
dpkg-deb -x "$partial"/prometheus_*.deb "$partial/unpacked"
mkdir -p "$(dirname "$LLAMA_RPC_PROMTOOL")"
install -m 0755 "$partial/unpacked/usr/bin/promtool" "$LLAMA_RPC_PROMTOOL"
say "promtool: $("$LLAMA_RPC_PROMTOOL" --version 2>&1 | head -1)"
