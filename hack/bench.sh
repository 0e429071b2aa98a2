#!/usr/bin/env bash
# Runs the benchmark: failover latency, API writes, CPU and memory at 100, 1,000 and 10,000
# policies against the floor, on a local control plane it starts itself. Prints a table and
# writes target/bench/results.json. Extra arguments go to the benchmark program, e.g.
#   hack/bench.sh --scales 100,1000 --flips 200 --churn 50 --quiet-seconds 60
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hack/build-control-plane.sh >/dev/null
cargo build --release --locked --bin failover-controller --example benchmark
exec target/release/examples/benchmark "$@"
