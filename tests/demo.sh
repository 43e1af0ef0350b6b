#!/usr/bin/env bash
# make demo / make demo-clean. The local llama.cpp cluster (master + two workers, a demo model,
# site.yml) is not built yet; until it is, `make demo` brings up the test bed and says so.
set -euo pipefail
. "$(dirname "$0")/bed/lib.sh"
cd "$REPO_ROOT"
bash tests/bed/host.sh
VENV=$(bash tests/bed/venv.sh)
. tests/bed/env.sh

case "${1:-up}" in
  up)
    bash tests/bed/images.sh
    detect_privileged
    molecule create -s default
    molecule prepare -s default
    molecule converge -s default
    cat <<MSG

make demo: the test bed is up; the llama.cpp cluster is not part of it yet.
  What runs: two systemd containers on the private docker network 'llama-rpc-bed'
$(docker ps --filter name=llama-rpc-bed- --format '    {{.Names}} ({{.Image}}, {{.Status}})')
  Each serves a small hardened unit (bed-http.service, port 8099) that the other has read.
  Look inside:  docker exec -it llama-rpc-bed-bookworm systemctl status bed-http
  Remove it:    make demo-clean
MSG
    ;;
  down)
    molecule destroy -s default
    say "make demo-clean: the test bed containers and network are removed (images and caches are kept)"
    ;;
  *) die "usage: tests/demo.sh up|down" ;;
esac
