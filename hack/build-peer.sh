#!/usr/bin/env bash
# Builds linkerd-failover, the peer the benchmark measures, from upstream's source archive at the
# commit pinned in hack/versions.env (its digest checked), unmodified; its dependencies come from
# crates.io as its own Cargo.lock pins them. The archive is not part of this repository (another
# project's source): LINKERD_FAILOVER_ARCHIVE names it, e.g. one made in a clone of
# github.com/linkerd/linkerd-failover with
#   git archive --prefix=linkerd-failover-8679d57/ -o linkerd-failover-8679d57.tar.gz 8679d57
# Prints the binary's path; the build is cached in target/peers/. Exits 2 when no archive is
# given or it is missing, so the benchmark can say why the peer is not measured.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=versions.env
source hack/versions.env
short=${LINKERD_FAILOVER_COMMIT:0:7}
archive=${LINKERD_FAILOVER_ARCHIVE:-}
if [[ -z $archive || ! -f $archive ]]; then
  echo "build-peer: no linkerd-failover archive (LINKERD_FAILOVER_ARCHIVE=${archive:-unset})" >&2
  exit 2
fi
digest=$(sha256sum "$archive" | cut -d' ' -f1)
if [[ $digest != "$LINKERD_FAILOVER_SHA256" ]]; then
  echo "build-peer: $archive is not linkerd-failover $short (sha256 $digest, expected $LINKERD_FAILOVER_SHA256)" >&2
  exit 1
fi
root=$PWD/target/peers
source_dir=$root/linkerd-failover-$short
binary=$root/target/release/linkerd-failover-controller
if [[ ! -x $binary ]]; then
  mkdir -p "$root"
  rm -rf "$source_dir"
  tar -xzf "$archive" -C "$root"
  # Its rust-toolchain file asks for an older release than this machine has; any newer stable
  # builds it. Its own lock file, its own release profile.
  (cd "$source_dir" && RUSTUP_TOOLCHAIN=stable CARGO_TARGET_DIR=$root/target \
    cargo build --release --locked -p linkerd-failover-controller >&2)
fi
echo "$binary"
