#!/usr/bin/env bash
# Runs every check and test, from a fresh machine of this project's kind: verifies the
# toolchains, builds (or reuses) the local control-plane and node binaries, then runs formatting,
# lint and all tests (unit, property, the integration tests against a real local control plane,
# and the tests on a real node, which install containerd, runc and the CNI plugins from Debian's
# packages and build the controller's image from the Dockerfile; FAILOVER_SKIP_NODE_TESTS=1 skips
# those, loudly). Every test binary runs even when one fails; the end lists every failed test,
# and the figures the tests measured are in target/test-figures.log. The last lines are a table
# of each phase's wall time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Each phase's wall time, kept for the table the run ends with (also when it fails).
timings=()
current=""
begun=$SECONDS
phase() {
  [[ -z $current ]] || timings+=("$current"$'\t'"$((SECONDS - begun))")
  current=$1
  begun=$SECONDS
  echo "== $1"
}
print_timings() {
  [[ -z $current ]] || timings+=("$current"$'\t'"$((SECONDS - begun))")
  current=""
  echo "== time per phase"
  ((${#timings[@]})) || return 0
  printf '%s\n' "${timings[@]}" | awk -F'\t' '{printf "%6d s  %s\n", $2, $1; t += $2} END {printf "%6d s  in all\n", t}'
}
trap print_timings EXIT

need() { command -v "$1" >/dev/null || { echo "test: '$1' is required: $2" >&2; exit 1; }; }
need cargo "install Rust (rustup)"
need go "install Go 1.25 or newer"
for tool in openssl curl python3; do
  if ! command -v "$tool" >/dev/null; then
    echo "test: installing $tool from Debian's packages" >&2
    (apt-get update -qq && apt-get install -y -qq "$tool") >/dev/null
  fi
done
rustup component add clippy rustfmt >/dev/null 2>&1 || true

phase "control-plane, node, Prometheus and proxy binaries"
if [[ "${FAILOVER_SKIP_NODE_TESTS:-}" == 1 ]]; then hack/build-control-plane.sh --prometheus; else hack/build-control-plane.sh --node --prometheus --proxy; fi
phase "cargo fmt --check"
cargo fmt --all -- --check
phase "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
phase "the API and core crates on their own (no API client reaches them)"
# A workspace build unifies kube's features: only a build of these crates alone shows that they
# use nothing of kube's client.
cargo check -p failover-api -p failover-core --all-targets --locked
phase "the kubectl-failover plugin"
# A crate of its own: the integration tests run its binary, which their build does not make.
cargo build -p kubectl-failover --locked
phase "the test binaries (cargo test --no-run)"
cargo test --workspace --all-targets --locked --no-run "$@"
phase "cargo test"
# Every test skipped on purpose is recorded here (tests/it/support/skips.rs) and counted below.
skips=$(mktemp "${TMPDIR:-/tmp}/failover-skips.XXXXXX")
export FAILOVER_SKIPS_FILE=$skips
# Every figure a test measured is appended here (tests/it/support: `figure`), so a run's figures can
# be kept (docs/bench-runs) and cited.
mkdir -p target
export FAILOVER_FIGURES_FILE=$PWD/target/test-figures.log
: > "$FAILOVER_FIGURES_FILE"
output=$(mktemp "${TMPDIR:-/tmp}/failover-test-output.XXXXXX")
trap 'rm -f "$skips" "$output"; print_timings' EXIT
# --no-fail-fast: a failing test binary does not hide the others; the failures are listed below.
set +e
cargo test --workspace --all-targets --locked --no-fail-fast "$@" 2>&1 | tee "$output"
status=${PIPESTATUS[0]}
set -e

echo "== skipped tests"
if [[ ! -s "$skips" ]]; then
  echo "none"
else
  sort "$skips" | uniq | awk -F'\t' '{n[$2]++; t[$2] = t[$2] "\n    " $1} END {for (v in n) printf "%d skipped because %s=1:%s\n", n[v], v, t[v]}'
  # A skip is only ever on purpose: one recorded without its variable set fails the run.
  while IFS=$'\t' read -r test variable; do
    if [[ "${!variable:-}" != 1 ]]; then
      echo "test: '$test' was skipped although $variable is not set" >&2
      status=1
    fi
  done < "$skips"
fi
echo "== test figures"
echo "$(wc -l < "$FAILOVER_FIGURES_FILE") figures in target/test-figures.log"
echo "== failed tests"
if grep -E '^test .+ \.\.\. FAILED$' "$output"; then
  status=1
  # Each failure's own output (its panic message last), so the end of the log says why.
  echo "== why they failed"
  awk '/^---- .* stdout ----$/ {on = 1; trace = 0} /^(failures|successes):$/ {on = 0}
       /^stack backtrace:$/ {trace = 1} on && !trace' "$output" | tail -n 200
elif [[ "$status" == 0 ]]; then
  echo "none"
else
  echo "none by name; cargo test exited $status (a build or a test binary failed: see above)"
fi
exit "$status"
