#!/usr/bin/env bash
# The one-command demo: starts a local control plane, installs the CRDs, runs the controller,
# applies samples/, creates the backend Services and EndpointSlices, then makes every primary
# unready and ready again, and one Proportional primary half ready, with what capacity sends
# each backend during the failover and a drill running throughout, showing
# `kubectl get failoverpolicies` and the TrafficSplit and HTTPRoute weights at each step. Each
# step waits until the controller has acted on it (never a fixed sleep), and a step that does not
# settle stops the demo with its name. Everything it started is stopped and removed at the end,
# also on Ctrl-C.
#
#   hack/demo.sh          the fast demo (EndpointSlices written by hand)
#   hack/demo.sh --node   on a real node (needs root): the controller's image and chart, backend
#                         Pods whose readiness probes fail and pass, the weights moving
#
# The samples are read as Kubernetes reads them (the API server parses them in a server-side dry
# run), so comments, flow style and multi-document files are all understood.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
step=""
begin() { step=$*; say "$*"; }
fail() { echo "demo: step '$step' failed: $*" >&2; exit 1; }
if [[ "${1:-}" == "--node" ]]; then
  exec hack/demo-node.sh
fi
[[ $# == 0 ]] || { echo "usage: hack/demo.sh [--node]" >&2; exit 2; }
bin=$(hack/build-control-plane.sh | tail -n 1)
export PATH="$bin:$PATH"
# Short holds so the demo shows them without making you wait; they are patched into every
# policy that has them.
hold=3s

begin "building the controller"
cargo build --quiet --bin failover-controller --bin crd-gen

begin "starting a local control plane (etcd, kube-apiserver, kube-controller-manager)"
cp_out=$(hack/control-plane.sh start --owner-pid $$)
eval "$(tail -n 1 <<< "$cp_out")"
cp_dir=$(dirname "$KUBECONFIG")
echo "control plane directory: $cp_dir"
controller_pid=""
work=$cp_dir/demo
mkdir -p "$work"
cleanup() {
  local code=$?
  trap - EXIT INT TERM
  say "cleaning up"
  if [[ -n "$controller_pid" ]]; then
    kill "$controller_pid" 2>/dev/null || true
    wait "$controller_pid" 2>/dev/null || true
  fi
  hack/control-plane.sh stop "$cp_dir" || true
  if (( code != 0 )) && [[ -n "$step" ]]; then echo "demo: stopped in step '$step' (exit $code)" >&2; fi
  exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

begin "installing the CRDs (cargo run --bin crd-gen -- --with-traffic-split | kubectl apply -f -) and the Gateway API's"
target/debug/crd-gen --with-traffic-split | kubectl apply -f -
source hack/versions.env
kubectl apply --server-side -f "$bin/gateway-api-$GATEWAY_API_VERSION-standard.yaml" >/dev/null
kubectl wait --for=condition=Established --timeout=60s crd/failoverpolicies.failover.dev crd/failovergroups.failover.dev crd/trafficsplits.split.smi-spec.io crd/httproutes.gateway.networking.k8s.io crd/grpcroutes.gateway.networking.k8s.io crd/tlsroutes.gateway.networking.k8s.io crd/tcproutes.gateway.networking.k8s.io >/dev/null

begin "starting failover-controller"
target/debug/failover-controller --log-level warn,failover=info > "$cp_dir/logs/failover-controller.log" 2>&1 &
controller_pid=$!

begin "reading samples/ as the API server parses it (kubectl apply --dry-run=server -o json)"
# What the demo reads from JSON, in Python's standard library: the backends of the policies in
# samples/, whether the controller has acted on the endpoints written last, and the holds to
# shorten.
cat > "$work/demo.py" <<'PY'
import json, sys

def policies(doc):
    items = doc.get("items", [doc]) if doc.get("kind") == "List" else [doc]
    return [o for o in items if o.get("kind") == "FailoverPolicy"]

def backends(path):
    """`role service` lines: every primary and secondary Service, and the Proportional primaries."""
    found = policies(json.load(open(path)))
    if not found:
        sys.exit("no FailoverPolicy in samples/")
    lines = []
    for p in found:
        spec = p["spec"]
        lines.append(f"primary {spec['primary']}")
        lines += [f"secondary {s['service']}" for s in spec["secondaries"]]
        if spec.get("strategy") == "Proportional":
            lines.append(f"proportional {spec['primary']}")
    print("\n".join(dict.fromkeys(lines)))

def off(want, expected):
    """What is not yet as expected, one line per policy and backend; nothing once it is."""
    expected = dict(kv.split("=") for kv in expected.split())
    for p in json.load(sys.stdin)["items"]:
        name, generation = p["metadata"]["name"], p["metadata"]["generation"]
        status = p.get("status") or {}
        if status.get("observedGeneration") != generation:
            print(f"{name}: no status of generation {generation} yet")
            continue
        for b in status.get("backends", []):
            svc = b["service"]
            if "readinessFrom" not in b and svc in expected and str(b["readyEndpoints"]) != expected[svc]:
                print(f"{name}: {svc} shows {b['readyEndpoints']} ready endpoints, not {expected[svc]}")
        ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
        if want == "settled" and ready.get("reason") in ("FailoverPending", "FailbackPending"):
            print(f"{name}: {ready['reason']} until {status.get('holdUntil')}")

def shorter_holds(hold):
    """A merge patch setting the holds of a policy to `hold`, or nothing."""
    spec, patch = json.load(sys.stdin)["spec"], {}
    for field in ("failoverAfter", "failbackAfter"):
        if spec.get(field, "0s") not in ("0", "0s"):
            patch[field] = hold
    if patch:
        print(json.dumps({"spec": patch}))

{"backends": backends, "off": off, "shorter-holds": shorter_holds}[sys.argv[1]](*sys.argv[2:])
PY
kubectl apply --dry-run=server -f samples/ -o json > "$work/samples.json" || fail "the API server refused a sample"
python3 "$work/demo.py" backends "$work/samples.json" > "$work/backends" || fail "reading the policies"
mapfile -t primaries < <(awk '$1 == "primary" {print $2}' "$work/backends" | sort -u)
mapfile -t backends < <(awk '$1 != "proportional" {print $2}' "$work/backends" | sort -u)
mapfile -t proportional < <(awk '$1 == "proportional" {print $2}' "$work/backends")
echo "${#backends[@]} backend Services named by the policies in samples/, ${#primaries[@]} of them primaries"

# One EndpointSlice per Service (selectorless Services, as a multi-cluster mesh's mirrored
# Services are), written in one apply: `endpoints SERVICE READY TOTAL ...`.
declare -A ready_of=()
endpoints() {
  local manifest="" svc ready total i
  while (( $# )); do
    svc=$1 ready=$2 total=$3
    shift 3
    ready_of[$svc]=$ready
    manifest+="---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: $svc-demo
  labels: {kubernetes.io/service-name: $svc, endpointslice.kubernetes.io/managed-by: demo}
addressType: IPv4
ports: [{port: 80}]
endpoints:"
    for ((i = 0; i < total; i++)); do
      manifest+="
- addresses: [\"10.0.$((RANDOM % 250)).$((i + 1))\"]
  conditions: {ready: $( ((i < ready)) && echo true || echo false )}"
    done
    ((total > 0)) || manifest+=" []"
    manifest+=$'\n'
  done
  kubectl apply -f - >/dev/null <<< "$manifest" || fail "writing EndpointSlices"
}

# Waits until every policy has taken in the endpoints written last: its status is of its current
# generation and each local backend shows the ready endpoints written. With `settled`, also
# until no hold is pending. Fails the step after 60 s, saying what is still off.
wait_for_controller() {
  local want=${1:-taken-in} deadline=$(( $(date +%s) + 60 )) expected="" svc off
  for svc in "${!ready_of[@]}"; do expected+="$svc=${ready_of[$svc]} "; done
  while true; do
    off=$(kubectl get failoverpolicies -o json | python3 "$work/demo.py" off "$want" "$expected")
    [[ -z "$off" ]] && return 0
    (( $(date +%s) < deadline )) || fail "the controller did not act within 60s: $(head -n 3 <<< "$off" | paste -sd ';')"
    sleep 0.3
  done
}

show() {
  kubectl get failoverpolicies
  echo
  kubectl get trafficsplits -o custom-columns='TRAFFICSPLIT:.metadata.name,BACKENDS:.spec.backends[*].service,WEIGHTS:.spec.backends[*].weight'
  local kind
  for kind in httproutes grpcroutes tlsroutes tcproutes; do
    echo
    kubectl get "$kind" -o custom-columns="${kind^^}:.metadata.name,BACKENDS:.spec.rules[0].backendRefs[*].name,WEIGHTS:.spec.rules[0].backendRefs[*].weight"
  done
}

begin "creating ${#backends[@]} backend Services, each with 2 ready endpoints"
services=""
for svc in "${backends[@]}"; do
  services+="---
apiVersion: v1
kind: Service
metadata: {name: $svc}
spec: {clusterIP: None, ports: [{port: 80}]}
"
done
kubectl apply -f - >/dev/null <<< "$services" || fail "creating the Services"
args=()
for svc in "${backends[@]}"; do args+=("$svc" 2 2); done
endpoints "${args[@]}"

begin "kubectl apply -f samples/"
kubectl apply -f samples/ || fail "kubectl apply -f samples/"

begin "an invalid policy is rejected at apply time (kubectl apply -f samples/invalid/primary-is-secondary.yaml)"
if kubectl apply -f samples/invalid/primary-is-secondary.yaml; then
  fail "the invalid policy was accepted"
fi

begin "shortening every failoverAfter and failbackAfter to $hold for the demo (failback ramps keep their steps)"
for p in $(kubectl get failoverpolicies -o name); do
  patch=$(kubectl get "$p" -o json | python3 "$work/demo.py" shorter-holds "$hold")
  [[ -z "$patch" ]] || kubectl patch "$p" --type merge -p "$patch" >/dev/null || fail "patching $p"
done

begin "every primary is ready: all traffic goes to the primaries"
wait_for_controller settled
show

begin "every primary loses its ready endpoints; failoverAfter holds traffic on them for $hold"
args=()
for svc in "${primaries[@]}"; do args+=("$svc" 0 2); done
endpoints "${args[@]}"
wait_for_controller
show

begin "once failoverAfter has passed: failed over"
wait_for_controller settled
show

begin "capacity: inventory's secondary takes only what its ready endpoints serve (status.capacity, condition DemandUnserved)"
kubectl get failoverpolicy inventory -o jsonpath='{.status.capacity}' | python3 -m json.tool
kubectl get failoverpolicy inventory -o jsonpath='{.status.conditions[?(@.type=="DemandUnserved")].message}{"\n"}'

begin "the primaries are ready again; failbackAfter holds traffic on the secondaries for $hold"
args=()
for svc in "${primaries[@]}"; do args+=("$svc" 2 2); done
endpoints "${args[@]}"
wait_for_controller
show

begin "once failbackAfter has passed: failed back (a failback ramp starts at its first step)"
wait_for_controller settled
show

if (( ${#proportional[@]} > 0 )); then
  begin "a Proportional primary, ${proportional[0]}, is half ready: 1.4 x 50% = 70% stays, 30% spills over"
  endpoints "${proportional[0]}" 1 2
  wait_for_controller settled
  show
fi

begin "a drill: ledger sends all traffic to ledger-dr until the drill's end, whatever the primaries did (condition Drill)"
kubectl get failoverpolicy ledger -o jsonpath='{.status.conditions[?(@.type=="Drill")]}' | python3 -m json.tool

begin "status of one policy (kubectl get failoverpolicy api-ordered -o jsonpath={.status})"
kubectl get failoverpolicy api-ordered -o jsonpath='{.status}' | python3 -m json.tool

begin "Events"
kubectl get events.events.k8s.io --sort-by=.metadata.creationTimestamp | tail -n 12
step=""
