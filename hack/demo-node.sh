#!/usr/bin/env bash
# The demo on a real node (hack/demo.sh --node): a local control plane with a node and a real
# proxy (Traefik serving the Gateway default/edge), the controller's image built from the
# Dockerfile and installed with the chart, backends that are Deployments with readiness probes
# answering HTTP with their name. A policy's HTTPRoute attaches to the Gateway; steady requests go
# through the proxy the whole time. Every primary Pod fails its probe, then passes again; at each
# step the demo shows the Pods, `kubectl failover status` and the requests of the last seconds by
# the backend that answered, failed ones counted. Everything is stopped and removed at the end,
# also on Ctrl-C.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
step=""
begin() { step=$*; say "$*"; }
fail() { echo "demo: step '$step' failed: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "demo --node: a node needs root (containerd, kubelet, cgroups, a bridge)" >&2; exit 1; }
bin=$(hack/build-control-plane.sh --node --proxy | tail -n 1)
export PATH="$bin:$PATH"
# Requests per second through the proxy, and how long the load may run at most.
rate=20
load_seconds=900

begin "building the kubectl failover plugin, crd-gen and the load generator"
cargo build --quiet -p kubectl-failover -p crd-gen -p failover-controller \
  --bin kubectl-failover --bin crd-gen --example load
export PATH="$PWD/target/debug:$PATH"

begin "starting a control plane with a real node and a proxy (containerd, kubelet, kube-proxy, kube-scheduler, Traefik)"
cp_out=$(hack/control-plane.sh start --node --proxy --owner-pid $$)
eval "$(tail -n 1 <<< "$cp_out")"
cp_dir=$(dirname "$KUBECONFIG")
echo "control plane directory: $cp_dir"
load_pid=""
cleanup() {
  local code=$?
  trap - EXIT INT TERM
  say "cleaning up"
  if [[ -n "$load_pid" ]]; then kill "$load_pid" 2>/dev/null || true; wait "$load_pid" 2>/dev/null || true; fi
  hack/control-plane.sh stop "$cp_dir" || true
  if (( code != 0 )) && [[ -n "$step" ]]; then echo "demo: stopped in step '$step' (exit $code)" >&2; fi
  exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# shellcheck source=/dev/null
source "$cp_dir/env"
kubectl get nodes -o wide
kubectl get gateway -n default edge

begin "building the controller's image from the Dockerfile (buildah, no registry) and importing it"
image=$(hack/images.sh controller | tail -n 1)
ctr --address "$cp_dir/node/containerd.sock" -n k8s.io images import "$image" >/dev/null

begin "installing the CRDs and the chart (helm install fc charts/failover-controller)"
crd-gen --with-traffic-split | kubectl apply -f - >/dev/null
helm install fc charts/failover-controller --set image.repository=localhost/failover-controller \
  --set image.tag=dev --set image.pullPolicy=Never --set watchNamespace=default --set logFormat=plain >/dev/null
kubectl rollout status deployment/fc-failover-controller --timeout=120s

begin "three backends: Deployments of busybox httpd, ready while /www/ready exists, answering with their name"
for name in web web-east web-west; do
  replicas=$([[ $name == web ]] && echo 2 || echo 1)
  sed -e "s/__NAME__/$name/g" -e "s/__REPLICAS__/$replicas/" -e "s/__RATE__/0/" hack/backend.yaml | kubectl apply -f - >/dev/null
done
for name in web web-east web-west; do kubectl rollout status "deployment/$name" --timeout=120s >/dev/null; done

begin "a policy whose HTTPRoute attaches to the Gateway default/edge (kubectl apply -f -)"
kubectl apply -f - <<'YAML'
apiVersion: failover.dev/v1alpha1
kind: FailoverPolicy
metadata: {name: web}
spec:
  service: web
  primary: web
  secondaries: [{service: web-east}, {service: web-west}]
  output: HTTPRoute
  httpRoute:
    port: 80
    gateways: [{name: edge, namespace: default}]
YAML
kubectl wait failoverpolicy/web --for=jsonpath='{.status.conditions[?(@.type=="Attached")].status}'=True --timeout=120s >/dev/null \
  || fail "the Gateway did not accept the route within 120s"

begin "steady traffic through the proxy: $rate requests per second to $PROXY_URL/cgi-bin/name"
load_log=$cp_dir/load.log
load_started=$(date +%s%3N)
target/debug/examples/load --url "$PROXY_URL/cgi-bin/name" --rate "$rate" --seconds "$load_seconds" > "$load_log" 2>&1 &
load_pid=$!

# The requests sent in the last 3 seconds, by the backend that answered ("failed": no answer or
# a 5xx). The load generator prints `<ms since its start> <status> <backend>` per answer.
traffic() {
  kill -0 "$load_pid" 2>/dev/null || fail "the load generator stopped: $(tail -n 3 "$load_log")"
  local now=$(( $(date +%s%3N) - load_started ))
  awk -v from=$(( now - 4000 )) -v to=$(( now - 1000 )) '
    $1 >= from && $1 < to { if ($2 == 0 || $2 >= 500) failed++; else by[$3]++; total++ }
    END {
      line = ""
      for (b in by) line = line sprintf("%s %d, ", b, by[b])
      printf "requests through the proxy in 3 seconds: %sfailed %d (of %d)\n", line, failed + 0, total + 0
    }' "$load_log"
}

# Waits until the policy's status has taken in the probes' verdict and sends traffic to $1, lets
# the proxy (which reloads its routes in a second or two) follow for a few seconds, then shows
# where they went.
show() {
  kubectl wait failoverpolicy/web --for=jsonpath='{.status.activeSummary}'="$1" --timeout=120s >/dev/null \
    || fail "traffic did not move to $1 within 120s"
  sleep 6
  kubectl get pods -l 'app in (web,web-east,web-west)' -o wide
  echo
  kubectl failover status web
  echo
  traffic
}
begin "every backend Pod is ready: all traffic goes to the primary"
show web

begin "every primary Pod fails its readiness probe (rm /www/ready inside each)"
for pod in $(kubectl get pods -l app=web -o name); do kubectl exec "$pod" -- rm -f /www/ready; done
show web-east

begin "they pass it again"
for pod in $(kubectl get pods -l app=web -o name); do kubectl exec "$pod" -- touch /www/ready; done
show web

begin "every request of the demo, by the backend that answered"
awk '{ if ($2 == 0 || $2 >= 500) failed++; else by[$3]++ } END { for (b in by) printf "%s %d\n", b, by[b]; printf "failed %d\n", failed + 0 }' "$load_log"

begin "why traffic is where it is (kubectl failover explain-decision web)"
kubectl failover explain-decision web
begin "the controller's log"
kubectl logs deployment/fc-failover-controller | tail -n 8
step=""
