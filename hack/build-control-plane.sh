#!/usr/bin/env bash
# Builds, once, the binaries the local control plane needs, from the Go module proxy:
# kube-apiserver, kube-controller-manager and kubectl (k8s.io/kubernetes), etcd (go.etcd.io/etcd)
# helm (helm.sh/helm), the manifest linter kube-score (github.com/zegl/kube-score), helm-docs
# (github.com/norwoodj/helm-docs, which writes the chart's README: hack/chart-readme.sh), and the
# Gateway API CRDs (standard channel, from the sigs.k8s.io/gateway-api module), and kstatus
# (hack/kstatus: how GitOps tools judge a resource's health, from the sigs.k8s.io/cli-utils
# module). They are cached outside the repository, keyed by hack/versions.env:
#   ${FAILOVER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/failover-controller}/k8s-<v>-etcd-<v>-helm-<v>/bin
# A warm cache returns at once. The last line printed is the bin directory.
# With --check, nothing is built: it fails with a message when the binaries are missing.
# With --prometheus, a Prometheus server too (github.com/prometheus/prometheus, no web UI), its
# promtool (checks and unit-tests the chart's alerting rules), the Prometheus Operator's
# ServiceMonitor and PrometheusRule CRDs (from its Go module), for the chart's optional objects,
# and an Alertmanager (github.com/prometheus/alertmanager), which the notification tests post to.
# With --node, the binaries of a real node are built too: kubelet, kube-proxy and kube-scheduler
# from the same module (for the real node; containerd, runc and the CNI plugins come from Debian's
# packages).
# With --proxy, the Traefik proxy too (github.com/traefik/traefik/v3), a Gateway API
# implementation that carries real requests to the node's Pods.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache_root=${FAILOVER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/failover-controller}
key="k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}-helm-${HELM_VERSION}"
bin="$cache_root/$key/bin"
work="$cache_root/$key/build"
tools=(kube-apiserver kube-controller-manager kubectl etcd helm kube-score helm-docs kstatus)
kube_cmds=(kube-apiserver kube-controller-manager kubectl)
mode=${1:-}
with_prometheus=0
for option in "$@"; do
  case $option in
    --node) tools+=(kubelet kube-proxy kube-scheduler); kube_cmds+=(kubelet kube-proxy kube-scheduler) ;;
    --prometheus) tools+=(prometheus promtool alertmanager); with_prometheus=1 ;;
    --proxy) tools+=(traefik) ;;
  esac
done

# The kstatus build's version: the cli-utils release and a digest of the program's source.
kstatus_version() {
  echo "$CLI_UTILS_VERSION-$(cksum < "$here/kstatus/main.go" | cut -d' ' -f1)"
}

# What helm's stamp must read: its version, and that it knows the Kubernetes version it assumes
# without a cluster (see build_helm).
helm_stamp() { echo "$HELM_VERSION-capabilities"; }
prometheus_operator_crds="$bin/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION-crds.yaml"

all_present() {
  for t in "${tools[@]}"; do [[ -x "$bin/$t" ]] || return 1; done
  [[ "$(cat "$bin/.helm-version" 2>/dev/null)" == "$(helm_stamp)" ]] || return 1
  [[ "$(cat "$bin/.kube-score-version" 2>/dev/null)" == "$KUBE_SCORE_VERSION" ]] || return 1
  [[ "$(cat "$bin/.helm-docs-version" 2>/dev/null)" == "$HELM_DOCS_VERSION" ]] || return 1
  [[ $with_prometheus == 0 || "$(cat "$bin/.promtool-version" 2>/dev/null)" == "$PROMETHEUS_MODULE_VERSION" ]] || return 1
  [[ $with_prometheus == 0 || -s "$prometheus_operator_crds" ]] || return 1
  [[ $with_prometheus == 0 || "$(cat "$bin/.alertmanager-version" 2>/dev/null)" == "$ALERTMANAGER_VERSION" ]] || return 1
  [[ "$(cat "$bin/.kstatus-version" 2>/dev/null)" == "$(kstatus_version)" ]] || return 1
  [[ " ${tools[*]} " != *" traefik "* || "$(cat "$bin/.traefik-version" 2>/dev/null)" == "$TRAEFIK_VERSION" ]] || return 1
  [[ -s "$bin/gateway-api-$GATEWAY_API_VERSION-standard.yaml" && -s "$bin/gateway-api-$GATEWAY_API_VERSION-experimental.yaml" ]]
}
if all_present; then
  echo "$bin"
  exit 0
fi
if [[ "$mode" == "--check" ]]; then
  build=hack/build-control-plane.sh
  for option in "$@"; do [[ "$option" == --check ]] || build+=" $option"; done
  echo "build-control-plane: the control-plane binaries are not built yet (looked in $bin); build them once with: $build" >&2
  exit 1
fi

command -v go >/dev/null || { echo "build-control-plane: step 'check toolchain' failed: 'go' is not on PATH (install Go 1.25 or newer)" >&2; exit 1; }
mkdir -p "$bin" "$work"
export GOFLAGS="-buildvcs=false -trimpath"
export CGO_ENABLED=0

step() { echo "build-control-plane: $*" >&2; }
fail() { echo "build-control-plane: step '$1' failed (log: $2):" >&2; tail -n 30 "$2" >&2; exit 1; }

# k8s.io/kubernetes cannot be 'go install'ed: its go.mod replaces every k8s.io/* staging module
# with a local path. A throw-away wrapper module requires it and replaces each staging module
# with its published v0.<minor>.<patch> release instead.
build_kubernetes() {
  local mod="$work/kubernetes" log="$work/kubernetes.log" staging
  rm -rf "$mod" && mkdir -p "$mod"
  staging="0.${K8S_VERSION#1.}"
  step "resolving k8s.io/kubernetes v$K8S_VERSION (staging modules v$staging)"
  {
    echo "module localbuild/kubernetes"
    echo
    echo "go 1.25.0"
    echo
    echo "require k8s.io/kubernetes v$K8S_VERSION"
  } > "$mod/go.mod"
  (cd "$mod" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION") > "$log" 2>&1 || fail "download k8s.io/kubernetes" "$log"
  local upstream_mod
  upstream_mod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    echo
    echo "replace ("
    awk '/^require/,/^\)/' "$upstream_mod" | awk '$1 ~ /^k8s.io\// && $2 == "v0.0.0" {print "\t" $1 " => " $1 " v'"$staging"'"}'
    echo ")"
  } >> "$mod/go.mod"
  for cmd in "${kube_cmds[@]}"; do
    [[ -x "$bin/$cmd" ]] && continue
    step "building $cmd v$K8S_VERSION (a cold build takes several minutes)"
    (cd "$mod" && go build -mod=mod -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION" \
      -o "$bin/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd") >> "$log" 2>&1 || fail "build $cmd" "$log"
    mv "$bin/$cmd.tmp" "$bin/$cmd"
  done
}

# etcd's server module carries replace directives too, so it gets its own wrapper module.
build_etcd() {
  local mod="$work/etcd" log="$work/etcd.log"
  rm -rf "$mod" && mkdir -p "$mod"
  printf 'module localbuild/etcd\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$ETCD_VERSION" > "$mod/go.mod"
  step "building etcd v$ETCD_VERSION"
  (cd "$mod" && go build -mod=mod -ldflags "-s -w" -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3) > "$log" 2>&1 || fail "build etcd" "$log"
  mv "$bin/etcd.tmp" "$bin/etcd"
}

# As helm's own Makefile does, the Kubernetes version that `helm template` and `helm lint` assume
# without a cluster is the one of the client-go module helm is built with (without it, helm
# assumes v1.20 and refuses a chart that needs a newer one, as this chart's kubeVersion does).
build_helm() {
  local mod="$work/helm" log="$work/helm.log" major="${HELM_VERSION%%.*}" client_go kube_minor
  rm -rf "$mod" && mkdir -p "$mod"
  printf 'module localbuild/helm\n\ngo 1.24\n\nrequire helm.sh/helm/v%s v%s\n' "$major" "$HELM_VERSION" > "$mod/go.mod"
  step "building helm v$HELM_VERSION"
  client_go=$(cd "$mod" && go list -mod=mod -m -f '{{.Version}}' k8s.io/client-go 2> "$log") || fail "find helm's client-go" "$log"
  kube_minor=$(echo "$client_go" | cut -d. -f2)
  [[ "$kube_minor" =~ ^[0-9]+$ ]] || fail "read the minor version of client-go $client_go" "$log"
  local pkg="helm.sh/helm/v$major/pkg" flags="-s -w -X helm.sh/helm/v$major/internal/version.version=v$HELM_VERSION"
  flags+=" -X $pkg/chartutil.k8sVersionMajor=1 -X $pkg/chartutil.k8sVersionMinor=$kube_minor"
  flags+=" -X $pkg/lint/rules.k8sVersionMajor=1 -X $pkg/lint/rules.k8sVersionMinor=$kube_minor"
  (cd "$mod" && go build -mod=mod -ldflags "$flags" -o "$bin/helm.tmp" "helm.sh/helm/v$major/cmd/helm") >> "$log" 2>&1 || fail "build helm" "$log"
  mv "$bin/helm.tmp" "$bin/helm"
  helm_stamp > "$bin/.helm-version"
}

# Builds one Go program into the bin folder, from a throw-away module (declaring Go version GO)
# that requires MODULE at VERSION: its package PACKAGE, or, given a SOURCE file of ours, that file
# as the module's main package. STAMP, when given, goes to .NAME-version: what decides whether a
# cached build is current.
#   build_go_tool NAME GO MODULE VERSION PACKAGE [STAMP] [SOURCE]
build_go_tool() {
  local name=$1 go=$2 module=$3 version=$4 package=$5 stamp=${6:-} source=${7:-}
  local mod="$work/$name" log="$work/$name.log"
  rm -rf "$mod" && mkdir -p "$mod"
  printf 'module localbuild/%s\n\ngo %s\n\nrequire %s v%s\n' "${name//-/}" "$go" "$module" "$version" > "$mod/go.mod"
  [[ -z $source ]] || cp "$source" "$mod/main.go"
  step "building $name ($module v$version; a cold build can take minutes)"
  (cd "$mod" && go build -mod=mod -ldflags "-s -w" -o "$bin/$name.tmp" "$package") > "$log" 2>&1 || fail "build $name" "$log"
  mv "$bin/$name.tmp" "$bin/$name"
  [[ -z $stamp ]] || echo "$stamp" > "$bin/.$name-version"
}

build_kube_score() {
  build_go_tool kube-score 1.23 github.com/zegl/kube-score "$KUBE_SCORE_VERSION" \
    github.com/zegl/kube-score/cmd/kube-score "$KUBE_SCORE_VERSION"
}

build_helm_docs() {
  build_go_tool helm-docs 1.22 github.com/norwoodj/helm-docs "$HELM_DOCS_VERSION" \
    github.com/norwoodj/helm-docs/cmd/helm-docs "$HELM_DOCS_VERSION"
}

# kstatus is our own program (hack/kstatus) on sigs.k8s.io/cli-utils.
build_kstatus() {
  build_go_tool kstatus 1.24 sigs.k8s.io/cli-utils "$CLI_UTILS_VERSION" . "$(kstatus_version)" \
    "$here/kstatus/main.go"
}

build_prometheus() {
  build_go_tool prometheus 1.25 github.com/prometheus/prometheus "$PROMETHEUS_MODULE_VERSION" \
    github.com/prometheus/prometheus/cmd/prometheus
}

# promtool, from the same module and version as the server.
build_promtool() {
  build_go_tool promtool 1.25 github.com/prometheus/prometheus "$PROMETHEUS_MODULE_VERSION" \
    github.com/prometheus/prometheus/cmd/promtool "$PROMETHEUS_MODULE_VERSION"
}

# Alertmanager, which the controller's alerts are posted to in the notification tests. Its module
# embeds a web UI built by npm (ui/app/dist), which the module zip does not carry: the build runs
# in a copy of the module with a one-page placeholder there (no web UI; the API is whole).
build_alertmanager() {
  local log="$work/alertmanager.log" src="$work/alertmanager-src" dir
  step "building alertmanager (github.com/prometheus/alertmanager v$ALERTMANAGER_VERSION; a cold build can take minutes)"
  dir=$(cd "$work" && go mod download -json "github.com/prometheus/alertmanager@v$ALERTMANAGER_VERSION" 2> "$log" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p') || fail "download github.com/prometheus/alertmanager" "$log"
  rm -rf "$src" && cp -r "$dir" "$src" && chmod -R u+w "$src"
  for ui in elm mantine; do
    mkdir -p "$src/ui/app/dist/$ui"
    echo '<!doctype html><title>Alertmanager</title><p>Built without its web UI; the API is at /api/v2.' > "$src/ui/app/dist/$ui/index.html"
  done
  (cd "$src" && go build -ldflags "-s -w" -o "$bin/alertmanager.tmp" ./cmd/alertmanager) >> "$log" 2>&1 || fail "build alertmanager" "$log"
  mv "$bin/alertmanager.tmp" "$bin/alertmanager"
  echo "$ALERTMANAGER_VERSION" > "$bin/.alertmanager-version"
}

# The Prometheus Operator's ServiceMonitor and PrometheusRule CRDs, as published in its Go module
# (example/prometheus-operator-crd): the chart's optional objects of those kinds are checked
# against them.
fetch_prometheus_operator_crds() {
  local log="$work/prometheus-operator.log" dir kind
  step "fetching the Prometheus Operator v$PROMETHEUS_OPERATOR_VERSION CRDs from its Go module"
  dir=$(cd "$work" && go mod download -json "github.com/prometheus-operator/prometheus-operator@v$PROMETHEUS_OPERATOR_VERSION" 2> "$log" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p') || fail "download github.com/prometheus-operator/prometheus-operator" "$log"
  : > "$prometheus_operator_crds.tmp"
  for kind in servicemonitors prometheusrules; do
    [[ -s "$dir/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" ]] || fail "find the $kind CRD in the module" "$log"
    { echo "---"; cat "$dir/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml"; } >> "$prometheus_operator_crds.tmp"
  done
  mv "$prometheus_operator_crds.tmp" "$prometheus_operator_crds"
}

# Traefik cannot be 'go install'ed either: its go.mod replaces and excludes modules. A wrapper
# module requires it and repeats those lines, taken from the release's own go.mod. (v3.7 needs
# modules the proxy refuses; v3.6's whole graph resolves.)
build_traefik() {
  local mod="$work/traefik" log="$work/traefik.log" upstream pkg=github.com/traefik/traefik/v3
  rm -rf "$mod" && mkdir -p "$mod"
  step "building traefik v$TRAEFIK_VERSION (a cold build takes several minutes)"
  printf 'module localbuild/traefik\n\ngo 1.25.0\n\nrequire %s v%s\n' "$pkg" "$TRAEFIK_VERSION" > "$mod/go.mod"
  upstream=$(cd "$mod" && go mod download -json "$pkg@v$TRAEFIK_VERSION" 2> "$log" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p') || fail "download traefik" "$log"
  [[ -s "$upstream" ]] || fail "find traefik's go.mod" "$log"
  {
    echo
    awk '/^replace \(/,/^\)/' "$upstream"
    grep '^replace [^(]' "$upstream" || true
    grep '^exclude ' "$upstream" || true
    awk '/^exclude \(/,/^\)/' "$upstream"
  } >> "$mod/go.mod"
  (cd "$mod" && go build -mod=mod -ldflags "-s -w -X $pkg/pkg/version.Version=v$TRAEFIK_VERSION -X $pkg/pkg/version.Codename=$TRAEFIK_CODENAME" \
    -o "$bin/traefik.tmp" "$pkg/cmd/traefik") >> "$log" 2>&1 || fail "build traefik" "$log"
  mv "$bin/traefik.tmp" "$bin/traefik"
  echo "$TRAEFIK_VERSION" > "$bin/.traefik-version"
}

# The Gateway API's CRDs, as published in its Go module: the standard channel
# (config/crd/standard) and the experimental one (config/crd/experimental, which also serves the
# alpha versions of TLSRoute and TCPRoute that the proxy reads), one bundle each.
fetch_gateway_api_crds() {
  local log="$work/gateway-api.log" dir channel out f
  step "fetching the Gateway API v$GATEWAY_API_VERSION CRDs from its Go module"
  dir=$(cd "$work" && go mod download -json "sigs.k8s.io/gateway-api@v$GATEWAY_API_VERSION" 2> "$log" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p') || fail "download sigs.k8s.io/gateway-api" "$log"
  for channel in standard experimental; do
    [[ -d "$dir/config/crd/$channel" ]] || fail "find the Gateway API $channel CRDs in the module" "$log"
    out="$bin/gateway-api-$GATEWAY_API_VERSION-$channel.yaml"
    : > "$out.tmp"
    for f in "$dir"/config/crd/"$channel"/*.yaml; do
      [[ "$(basename "$f")" == kustomization.yaml ]] && continue
      { echo "---"; cat "$f"; } >> "$out.tmp"
    done
    mv "$out.tmp" "$out"
  done
}

start=$(date +%s)
[[ -x "$bin/etcd" ]] || build_etcd
missing_kube=0
for cmd in "${kube_cmds[@]}"; do [[ -x "$bin/$cmd" ]] || missing_kube=1; done
[[ $missing_kube == 0 ]] || build_kubernetes
[[ -x "$bin/helm" && "$(cat "$bin/.helm-version" 2>/dev/null)" == "$(helm_stamp)" ]] || build_helm
[[ -x "$bin/kube-score" && "$(cat "$bin/.kube-score-version" 2>/dev/null)" == "$KUBE_SCORE_VERSION" ]] || build_kube_score
[[ -x "$bin/helm-docs" && "$(cat "$bin/.helm-docs-version" 2>/dev/null)" == "$HELM_DOCS_VERSION" ]] || build_helm_docs
[[ -s "$bin/gateway-api-$GATEWAY_API_VERSION-standard.yaml" && -s "$bin/gateway-api-$GATEWAY_API_VERSION-experimental.yaml" ]] || fetch_gateway_api_crds
[[ -x "$bin/kstatus" && "$(cat "$bin/.kstatus-version" 2>/dev/null)" == "$(kstatus_version)" ]] || build_kstatus
if [[ " ${tools[*]} " == *" prometheus "* && ! -x "$bin/prometheus" ]]; then build_prometheus; fi
if [[ $with_prometheus == 1 && "$(cat "$bin/.promtool-version" 2>/dev/null)" != "$PROMETHEUS_MODULE_VERSION" ]]; then build_promtool; fi
if [[ $with_prometheus == 1 && ! -s "$prometheus_operator_crds" ]]; then fetch_prometheus_operator_crds; fi
if [[ $with_prometheus == 1 && "$(cat "$bin/.alertmanager-version" 2>/dev/null)" != "$ALERTMANAGER_VERSION" ]]; then build_alertmanager; fi
if [[ " ${tools[*]} " == *" traefik "* && "$(cat "$bin/.traefik-version" 2>/dev/null)" != "$TRAEFIK_VERSION" ]]; then build_traefik; fi
step "done in $(( $(date +%s) - start ))s"
echo "$bin"
