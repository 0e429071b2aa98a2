#!/usr/bin/env bash
# The one-command demo: starts a local control plane, installs the CRDs, runs the controller,
# applies samples/, creates the backend Services and EndpointSlices, then makes every primary
# unready and ready again, showing `kubectl get failoverpolicies` and the TrafficSplit weights at
# each step. Everything it started is stopped and removed at the end, also on Ctrl-C.
#
#   hack/demo.sh          the fast demo (EndpointSlices written by hand)
#   hack/demo.sh --node   on a real node (needs root): the controller's image and chart, backend
#                         Pods whose readiness probes fail and pass, the weights moving
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
if [[ "${1:-}" == "--node" ]]; then
  exec hack/demo-node.sh
fi
bin=$(hack/build-control-plane.sh | tail -n 1)
export PATH="$bin:$PATH"

say "building the controller"
cargo build --quiet --bin failover-controller --bin crd-gen

say "starting a local control plane (etcd, kube-apiserver, kube-controller-manager)"
cp_out=$(hack/control-plane.sh start --owner-pid $$)
eval "$(tail -n 1 <<< "$cp_out")"
cp_dir=$(dirname "$KUBECONFIG")
controller_pid=""
cleanup() {
  trap - EXIT INT TERM
  say "cleaning up"
  if [[ -n "$controller_pid" ]]; then
    kill "$controller_pid" 2>/dev/null || true
    wait "$controller_pid" 2>/dev/null || true
  fi
  hack/control-plane.sh stop "$cp_dir" || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "installing the CRDs (cargo run --bin crd-gen -- --with-traffic-split | kubectl apply -f -) and the Gateway API's"
target/debug/crd-gen --with-traffic-split | kubectl apply -f -
source hack/versions.env
kubectl apply --server-side -f "$bin/gateway-api-$GATEWAY_API_VERSION-standard.yaml" >/dev/null
kubectl wait --for=condition=Established --timeout=60s crd/failoverpolicies.failover.dev crd/trafficsplits.split.smi-spec.io crd/httproutes.gateway.networking.k8s.io >/dev/null

say "starting failover-controller"
target/debug/failover-controller --log-level warn,failover=info > "$cp_dir/logs/failover-controller.log" 2>&1 &
controller_pid=$!

# Every backend Service named by the samples, with its EndpointSlice (selectorless Services,
# as a multi-cluster mesh's mirrored Services are).
set_endpoints() { # service ready-endpoints not-ready-endpoints
  local endpoints="" i
  for ((i = 0; i < $2 + $3; i++)); do
    endpoints+="
- addresses: [\"10.0.$((RANDOM % 250)).$((i + 1))\"]
  conditions: {ready: $( ((i < $2)) && echo true || echo false )}"
  done
  kubectl apply -f - >/dev/null <<EOF
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: $1-demo
  labels: {kubernetes.io/service-name: $1, endpointslice.kubernetes.io/managed-by: demo}
addressType: IPv4
ports: [{port: 80}]
endpoints:${endpoints:- []}
EOF
}
primaries=()
backends=()
for f in samples/*.yaml; do
  primaries+=("$(sed -n 's/^  primary: *//p' "$f")")
  while read -r svc; do backends+=("$svc"); done < <(sed -n 's/^ *\(primary\|- service\): *//p' "$f")
done
say "creating ${#backends[@]} backend Services, each with 2 ready endpoints"
for svc in "${backends[@]}"; do
  kubectl create service clusterip "$svc" --clusterip=None --tcp=80 >/dev/null 2>&1 || true
  set_endpoints "$svc" 2 0
done

say "kubectl apply -f samples/"
kubectl apply -f samples/
say "an invalid policy is rejected at apply time"
kubectl apply -f samples/invalid/primary-is-secondary.yaml || true

say "shortening failoverAfter/failbackAfter to 3s for the demo (Proportional policies have none)"
for p in $(kubectl get failoverpolicies -o name); do
  kubectl patch "$p" --type merge -p '{"spec":{"failoverAfter":"3s","failbackAfter":"3s"}}' >/dev/null 2>&1 || true
done

show() {
  sleep "${1:-1}"
  kubectl get failoverpolicies
  echo
  kubectl get trafficsplits -o custom-columns='TRAFFICSPLIT:.metadata.name,BACKENDS:.spec.backends[*].service,WEIGHTS:.spec.backends[*].weight'
  echo
  kubectl get httproutes -o custom-columns='HTTPROUTE:.metadata.name,BACKENDS:.spec.rules[0].backendRefs[*].name,WEIGHTS:.spec.rules[0].backendRefs[*].weight'
}
say "every primary is ready: all traffic goes to the primaries"
show 2

say "every primary loses its ready endpoints; failoverAfter holds traffic for 3s"
for svc in "${primaries[@]}"; do set_endpoints "$svc" 0 2; done
show 1
say "3s later: failed over"
show 3

say "the primaries are ready again; failbackAfter holds traffic on the secondaries for 3s"
for svc in "${primaries[@]}"; do set_endpoints "$svc" 2 0; done
show 1
say "3s later: failed back"
show 3

say "status of one policy (kubectl get failoverpolicy api-ordered -o jsonpath={.status})"
kubectl get failoverpolicy api-ordered -o jsonpath='{.status}' | python3 -m json.tool
say "Events"
kubectl get events.events.k8s.io --sort-by=.metadata.creationTimestamp | tail -n 12
