#!/usr/bin/env bash
# Writes the chart's README (charts/failover-controller/README.md) from its README.md.gotmpl,
# Chart.yaml and values.yaml (each value's `# --` comment) with helm-docs, pinned in
# hack/versions.env and built by hack/build-control-plane.sh.
#   hack/chart-readme.sh            regenerate README.md
#   hack/chart-readme.sh --check    write nothing; exit 1 when README.md is not what it would write
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

chart=charts/failover-controller
case ${1:-} in
  "" | --check) ;;
  *) echo "usage: hack/chart-readme.sh [--check]" >&2; exit 2 ;;
esac

# Regenerating builds helm-docs on first use; a check only looks for it (it fails naming the
# build command when it is missing).
if [[ "${1:-}" == --check ]]; then
  bin=$(hack/build-control-plane.sh --check | tail -n 1)
else
  bin=$(hack/build-control-plane.sh | tail -n 1)
fi
helm_docs() {
  "$bin/helm-docs" --chart-search-root "$chart" --template-files README.md.gotmpl \
    --sort-values-order file --log-level warning "$@"
}

if [[ "${1:-}" == --check ]]; then
  # The dry run prints what it would write, and nothing else on standard output.
  if ! diff -u "$chart/README.md" <(helm_docs --dry-run) > /dev/null; then
    echo "chart-readme: $chart/README.md is stale; regenerate it with: hack/chart-readme.sh" >&2
    diff -u "$chart/README.md" <(helm_docs --dry-run) >&2 || true
    exit 1
  fi
  echo "chart-readme: $chart/README.md is current"
else
  helm_docs
  echo "chart-readme: wrote $chart/README.md"
fi
