#!/usr/bin/env bash
# Makes this machine able to run the test bed: root or a usable docker, the host packages that are
# missing (docker engine, debootstrap, python3-venv), and a docker daemon that answers.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

if ! is_root; then
  docker_answers || die "make test needs a Docker daemon it can use, and none answers.
  Run it as root (sudo make test): it then installs docker.io and debootstrap with apt and starts dockerd,
  or install Docker yourself and add your user to the 'docker' group (then log in again)."
  say "not root: using the docker daemon that answers; base images must already exist (sudo make images builds them)"
  exit 0
fi

command -v apt-get >/dev/null || die "this test bed installs its host packages with apt (Debian 12 or Ubuntu 24.04); install docker, debootstrap and python3-venv yourself, then re-run."

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
# ansible-test sanity skips its shellcheck test when shellcheck is missing.
command -v shellcheck >/dev/null || missing+=(shellcheck)
# The base images are Debian: an Ubuntu host needs Debian's archive keys for debootstrap.
[ -e /usr/share/keyrings/debian-archive-keyring.gpg ] || missing+=(debian-archive-keyring)
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
# The collection's llama.cpp patches are checked against the pinned source (tests/unit/test_llama_cpp_patches.py).
command -v patch >/dev/null || missing+=(patch)
# The cluster scenario reaches its hosts over SSH (ssh, and ssh-keygen for the test bed's key).
command -v ssh-keygen >/dev/null || missing+=(openssh-client)
# The Arm proof (tests/integration) compiles llama.cpp here: natively, and for aarch64 run under qemu-user.
for tool in cmake:cmake ccache:ccache g++:g++ aarch64-linux-gnu-g++:g++-aarch64-linux-gnu qemu-aarch64-static:qemu-user-static; do
  command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if [ "${#missing[@]}" -gt 0 ]; then
  apt_install "${missing[@]}"
fi
# The docker.io package ships the CLI too, but a CLI may already be on PATH without a daemon.
command -v docker >/dev/null || die "docker.io is installed but no 'docker' command is on PATH."

if ! docker_answers; then
  mkdir -p "$LLAMA_RPC_CACHE"
  log="$LLAMA_RPC_CACHE/dockerd.log"
  say "no docker daemon answers: starting dockerd (log: $log)"
  # setsid: the daemon outlives this make run, so a re-run finds it up.
  # LLAMA_RPC_DOCKERD_ARGS: extra dockerd flags (for example --host, --data-root, --storage-driver).
  # shellcheck disable=SC2086  # the flags are meant to split into words
  setsid dockerd ${LLAMA_RPC_DOCKERD_ARGS:-} >"$log" 2>&1 </dev/null &
  for _ in $(seq 1 60); do
    docker_answers && break
    kill -0 $! 2>/dev/null || break
    sleep 1
  done
  docker_answers || die "dockerd did not come up. Last lines of $log:
$(tail -n 25 "$log")"
fi
say "docker daemon: $(docker info --format '{{.ServerVersion}} ({{.Driver}}, cgroup v{{.CgroupVersion}})')"
