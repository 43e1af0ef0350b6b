#!/usr/bin/env bash
# Builds the test bed's systemd base images offline (no registry is reachable): debootstrap a Debian
# rootfs from the apt mirror, import it, and finish it with tests/bed/image/Dockerfile.
#   llama-rpc-testbed:bookworm  Debian 12
#   llama-rpc-testbed:trixie    Debian 13, the stand-in for Ubuntu 24.04's newer toolchain, with the compiler
# An image is rebuilt only when its recipe (suite, package list, mirror, the files in tests/bed/image) changes.
# A build that fails half way tags nothing, so a re-run never trusts a half-built image.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

read -r -a SUITES <<<"${LLAMA_RPC_TEST_SUITES:-bookworm trixie}"
PACKAGES=systemd,systemd-sysv,python3,sudo,dbus,iproute2,procps,ca-certificates
IMAGE_REPO=llama-rpc-testbed

# The Debian mirror apt already uses on a Debian host (deb822 or one-line format), else the public one.
debian_mirror() {
  if [ -n "${LLAMA_RPC_TEST_MIRROR:-}" ]; then echo "$LLAMA_RPC_TEST_MIRROR"; return; fi
  local uri
  uri=$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list /etc/apt/sources.list 2>/dev/null \
        | grep -oE 'https?://[^ ]+/debian/?( |$)' | grep -v security | head -n1 | tr -d ' ') || true
  echo "${uri:-http://deb.debian.org/debian}"
}

# What an image carries beyond the base. trixie's one host is the cluster scenario's worker that compiles its own build
# with no route out (molecule/cluster/prepare.yml): its image has the compiler (llama_build's compile packages) and what
# a worker needs, which that prepare would otherwise install at every run (99 s of apt there, the scenario's longest
# step before its deploy); the roles' own installs are still run on the bookworm hosts, from nothing.
preinstalled() {
  [ "$1" = trixie ] || return 0
  local compile worker
  compile=$(sed -n 's/^_llama_build_compile_packages: *\[\(.*\)\]$/\1/p' "$REPO_ROOT/roles/llama_build/vars/main.yml" | tr -d ,)
  [ -n "$compile" ] || die "no _llama_build_compile_packages list in roles/llama_build/vars/main.yml"
  worker=$(sed -n 's/^bed_worker_packages: *\[\(.*\)\]$/\1/p' "$REPO_ROOT/molecule/cluster/vars/worker_packages.yml" | tr -d ,)
  [ -n "$worker" ] || die "no bed_worker_packages list in molecule/cluster/vars/worker_packages.yml"
  echo "$compile $worker"
}

# The rootfs depends on what debootstrap is asked for; the image on that rootfs, the Dockerfile and what it preinstalls.
rootfs_hash() { echo "minbase $1 $PACKAGES $(debian_mirror)" | sha256sum | cut -c1-16; }
image_hash() { { rootfs_hash "$1"; preinstalled "$1"; cat "$REPO_ROOT"/tests/bed/image/*; } | sha256sum | cut -c1-16; }

# A half-made rootfs never survives: debootstrap may have left /proc and /sys mounted inside it,
# so unmount before removing.
workdir=""
remove_workdir() {
  [ -n "$workdir" ] && [ -d "$workdir" ] || return 0
  findmnt -rn -o TARGET | grep -F "$workdir/" | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf "$workdir"
  workdir=""
}
trap remove_workdir EXIT

build_one() {
  local suite=$1 hash image rootfs_image
  hash=$(image_hash "$suite")
  image="$IMAGE_REPO:$suite"
  if [ "$(docker image inspect -f '{{index .Config.Labels "graviton.llama_rpc.recipe"}}' "$image" 2>/dev/null)" = "$hash" ]; then
    say "image $image is up to date (recipe $hash)"
    return
  fi
  is_root || die "building $image needs root (debootstrap): run 'sudo make images' once."
  rootfs_image="$IMAGE_REPO-rootfs:$suite-$(rootfs_hash "$suite")"
  if ! docker image inspect "$rootfs_image" >/dev/null 2>&1; then
    workdir=$(mktemp -d "${TMPDIR:-/tmp}/llama-rpc-rootfs.XXXXXX")
    say "debootstrap $suite from $(debian_mirror) (about 2 minutes)"
    if ! debootstrap --variant=minbase --include="$PACKAGES" "$suite" "$workdir/rootfs" "$(debian_mirror)" >"$workdir/debootstrap.log" 2>&1; then
      tail -n 25 "$workdir/debootstrap.log" >&2
      die "debootstrap of $suite failed (log above). Check that the mirror $(debian_mirror) is reachable, or set LLAMA_RPC_TEST_MIRROR."
    fi
    # Only a complete import gets the tag a re-run looks for.
    local imported
    imported=$(tar -C "$workdir/rootfs" -c . | docker import -) || die "importing the $suite rootfs into docker failed."
    docker tag "$imported" "$rootfs_image"
    remove_workdir
  fi
  say "finishing $image"
  docker build -q --build-arg ROOTFS_IMAGE="$rootfs_image" --build-arg PREINSTALLED="$(preinstalled "$suite")" \
    --label "graviton.llama_rpc.recipe=$hash" -t "$image" "$REPO_ROOT/tests/bed/image" >/dev/null
  # Keep only the rootfs that the current recipe made.
  docker image ls --format '{{.Repository}}:{{.Tag}}' "$IMAGE_REPO-rootfs" | grep ":$suite-" | grep -vxF "$rootfs_image" \
    | xargs -r docker image rm >/dev/null 2>&1 || true
}

for suite in "${SUITES[@]}"; do build_one "$suite"; done
