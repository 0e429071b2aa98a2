#!/usr/bin/env bash
# Builds a release a platform team can install, into dist/<version>/:
#   failover-controller-<version>.image.tar   the controller's image, built from the Dockerfile,
#                                             named ghcr.io/failover-dev/failover-controller:<version>
#                                             (the chart's default), as a docker-archive;
#   failover-controller-<version>.tgz         the chart (helm package), version and appVersion
#                                             <version>;
#   kubectl-failover-<version>-linux-<arch>.tar.gz  the kubectl plugin (this machine's arch);
#   failover.yaml                             a krew manifest for the plugin;
#   SHA256SUMS                                the checksums of all of them.
# Every binary reports <version> (`--version`, failover_build_info). The README's "Install on your
# cluster" says how to load the image and install the chart.
#
#   hack/release.sh 0.2.0
#   HELM=/usr/local/bin/helm hack/release.sh 0.2.0   # with a helm of your own
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
version=${1:-}
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] \
  || { echo "usage: hack/release.sh VERSION (semantic, e.g. 0.2.0)" >&2; exit 1; }
dist=dist/$version
repository=ghcr.io/failover-dev/failover-controller
rm -rf "$dist" && mkdir -p "$dist"
step() { echo "release: $*" >&2; }

# helm: $HELM when set (a machine that has one), else the project's pinned build.
helm=${HELM:-$(hack/build-control-plane.sh | tail -n 1)/helm}
step "packaging the chart"
"$helm" package charts/failover-controller --version "$version" --app-version "$version" \
  --destination "$dist" >/dev/null

step "building the kubectl plugin"
FAILOVER_VERSION=$version cargo build --quiet --release --locked -p kubectl-failover
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
case $(uname -m) in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; *) arch=$(uname -m) ;; esac
plugin=kubectl-failover-$version-linux-$arch.tar.gz
tar -C "$target/release" -czf "$dist/$plugin" kubectl-failover
plugin_sha256=$(sha256sum "$dist/$plugin" | cut -d' ' -f1)

step "building the image $repository:$version from the Dockerfile"
IMAGE=$repository:$version ARCHIVE=$PWD/$dist/failover-controller-$version.image.tar \
  FAILOVER_VERSION=$version hack/images.sh controller >/dev/null

cat > "$dist/failover.yaml" <<KREW
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: failover
spec:
  version: v$version
  homepage: https://github.com/failover-dev/failover-controller
  shortDescription: Status, decisions and controls of FailoverPolicies
  description: |
    Shows each FailoverPolicy's backends, weights and conditions, explains why traffic is
    where it is, and pins, unpins, suspends and resumes policies.
  platforms:
    - selector:
        matchLabels: {os: linux, arch: $arch}
      uri: https://github.com/failover-dev/failover-controller/releases/download/v$version/$plugin
      sha256: $plugin_sha256
      bin: kubectl-failover
KREW

(cd "$dist" && sha256sum -- * > SHA256SUMS)
step "done"
echo "$dist"
