#!/usr/bin/env bash
# Runs the benchmark: failover latency, API writes, cold start, restart, recovery after an API
# server or etcd restart, CPU and memory at 100, 1,000 and 10,000 policies, each against a floor
# measured in the same run, on a local control plane it starts itself. Prints the tables and every
# target with its verdict, and writes target/bench/results.json. Extra arguments go to the
# benchmark program, e.g.
#   hack/bench.sh --scales 100,1000 --flips 200 --churn 50 --quiet-seconds 60 --restarts 0
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hack/build-control-plane.sh >/dev/null
cargo build --release --locked --bin failover-controller --example benchmark
exec target/release/examples/benchmark "$@"
