#!/usr/bin/env bash
# Builds the controller's image from the project's own Dockerfile, without a registry, and prints
# the path of an OCI archive of it (the last line). The Dockerfile takes its two base images as
# build arguments; where they cannot be pulled (no registry here) this script builds them locally:
#   BUILDER_IMAGE  Debian 12 (debootstrap, from Debian's packages) with gcc and this machine's Rust
#                  toolchain, in place of rust:<version>-bookworm;
#   RUNTIME_IMAGE  glibc, libgcc and a nonroot user, in place of distroless cc-debian12:nonroot.
# So the file users build is the file the tests build. Base images are cached beside the
# control-plane binaries; the controller's release build reuses a cargo cache mount.
#
#   hack/images.sh controller      # -> .../images/failover-controller.tar (localhost/failover-controller:dev)
#
# A release (hack/release.sh) names the image, the archive and the version the build reports:
#   IMAGE=<name:tag> ARCHIVE=<path> FAILOVER_VERSION=<version> hack/images.sh controller
# and gets a docker-archive (what `docker load`, `kind load image-archive`, `k3d image import`,
# `minikube image load` and `ctr images import` all read). Where the registries can be reached,
# REGISTRY_BASES=1 builds on the Dockerfile's own base images instead of local ones.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${FAILOVER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/failover-controller}/images
mkdir -p "$cache"
log() { echo "images: $*" >&2; }

b() { STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot buildah --root "$cache/storage" --runroot "$cache/run" "$@"; }

rust_version=$(rustc --version | awk '{print $2}')
builder="localhost/failover-builder:$rust_version"
runtime="localhost/failover-runtime:bookworm"

have() { b images -q "$1" 2>/dev/null | grep -q .; }

build_builder() {
  have "$builder" && return 0
  command -v debootstrap >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap) >/dev/null
  local root=$cache/builder-rootfs toolchain
  rm -rf "$root"
  log "debootstrap of Debian 12 with gcc (once)"
  debootstrap --variant=minbase --include=gcc,libc6-dev,ca-certificates bookworm "$root" http://deb.debian.org/debian > "$cache/debootstrap.log" 2>&1 \
    || { tail -n 20 "$cache/debootstrap.log" >&2; return 1; }
  # This machine's trust store (with any CA its network requires), so cargo inside reaches
  # crates.io as cargo outside does.
  cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  toolchain=$(rustc --print sysroot)
  log "adding the Rust $rust_version toolchain from $toolchain"
  cp -a "$toolchain/bin/." "$root/usr/local/bin/"
  cp -a "$toolchain/lib/." "$root/usr/local/lib/"
  local c
  c=$(b from scratch)
  b add --quiet "$c" "$root" / >/dev/null
  b config --env PATH=/usr/local/cargo/bin:/usr/local/bin:/usr/bin:/bin --env CARGO_HOME=/usr/local/cargo "$c"
  b commit --quiet "$c" "$builder" >/dev/null
  b rm "$c" >/dev/null
  rm -rf "$root"
}

build_runtime() {
  have "$runtime" && return 0
  local root=$cache/runtime-rootfs lib
  rm -rf "$root"
  mkdir -p "$root/lib/x86_64-linux-gnu" "$root/lib64" "$root/etc" "$root/tmp"
  for lib in libc.so.6 libm.so.6 libgcc_s.so.1; do cp -L "/lib/x86_64-linux-gnu/$lib" "$root/lib/x86_64-linux-gnu/"; done
  cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' > "$root/etc/group"
  chmod 1777 "$root/tmp"
  local c
  c=$(b from scratch)
  b add --quiet "$c" "$root" / >/dev/null
  b commit --quiet "$c" "$runtime" >/dev/null
  b rm "$c" >/dev/null
  rm -rf "$root"
}

build_controller() {
  local image=${IMAGE:-localhost/failover-controller:dev} archive format=oci-archive
  archive=${ARCHIVE:-$cache/failover-controller.tar}
  [[ -n ${ARCHIVE:-} ]] && format=docker-archive
  local bases=()
  if [[ ${REGISTRY_BASES:-0} != 1 ]]; then
    build_builder
    build_runtime
    bases=(--build-arg "BUILDER_IMAGE=$builder" --build-arg "RUNTIME_IMAGE=$runtime")
  fi
  log "building $image from the Dockerfile"
  b bud --isolation chroot --layers=false "${bases[@]}" \
    --build-arg "FAILOVER_VERSION=${FAILOVER_VERSION:-}" \
    -t "$image" -f "$repo/Dockerfile" "$repo" > "$cache/controller-build.log" 2>&1 \
    || { tail -n 30 "$cache/controller-build.log" >&2; return 1; }
  rm -f "$archive"
  b push --quiet "$image" "$format:$archive:$image" >/dev/null
  echo "$archive"
}

case ${1:-} in
  controller) build_controller ;;
  *) echo "usage: $0 controller" >&2; exit 1 ;;
esac
