#!/usr/bin/env bash
# Runs the benchmark: failover latency, API writes, cold start, restart, recovery after an API
# server or etcd restart, CPU and memory at 100, 1,000 and 10,000 policies, each against a floor
# measured in the same run, on a local control plane it starts itself; then failovers as requests
# through a real proxy see them, on a real node; last, memory and start-up at 30,000 and
# 100,000 policies, each on a control plane of its own. Prints the tables and every
# target with its verdict, and exits 1 when a target is missed or could not be measured
# (--report-only exits 0). Extra arguments go to the benchmark program, e.g.
#   hack/bench.sh --scales 100,1000 --flips 200 --churn 50 --quiet-seconds 60 --restarts 0
#
# Every run is kept: its whole output (stdout and stderr) and its JSON go to
# docs/bench-runs/<UTC date>-<commit>[-dirty][-<label>].{log,json} (dirty: uncommitted changes
# outside docs/); BENCH_LABEL=<label> names a run.
# The API server's CPU profiles of the latency windows go next to them, in
# <the same name>.apiserver-pprof/ (read with `go tool pprof`).
# docs/benchmarks.md cites runs by these files.
set -euo pipefail
# The benchmark profiles the API server's CPU over each latency window.
export APISERVER_PROFILING=true
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The traffic section needs a node and the proxy; where this machine cannot host a node, the
# section says "not measured" and why.
if hack/control-plane.sh check-node 2>/dev/null; then
  hack/build-control-plane.sh --node --proxy >/dev/null
else
  hack/build-control-plane.sh >/dev/null
fi
# The controller is built by itself, with the features it ships with: built with the benchmark,
# it would take the features the benchmark's own dependencies turn on too (more resident code).
cargo build --release --locked --example benchmark
cargo build --release --locked --bin failover-controller
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
# "dirty": what is built or run differs from the commit (docs and Markdown may be edited while it
# runs: neither is built or run); the log's header names what differs.
differs=$(git diff --name-only HEAD -- . ':!docs' ':!*.md' 2>/dev/null | paste -sd ' ')
[[ -z $differs ]] || commit="$commit-dirty"
run="docs/bench-runs/$(date -u +%Y%m%d-%H%M)-$commit${BENCH_LABEL:+-$BENCH_LABEL}"
mkdir -p docs/bench-runs
out=()
[[ " $* " == *" --out "* ]] || out=(--out "$run.json")
{
  echo "# hack/bench.sh $*"
  echo "# commit $commit, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
  [[ -z $differs ]] || echo "# differs from the commit: $differs"
} > "$run.log"
status=0
# The log is kept in the repository: the control plane's scratch directory is left out of it.
target/release/examples/benchmark "${out[@]}" "$@" 2>&1 \
  | sed -u 's# (directory [^)]*)##' | tee -a "$run.log" || status=${PIPESTATUS[0]}
echo "bench: this run's output is in $run.log${out[*]:+ and $run.json}" >&2
exit "$status"
