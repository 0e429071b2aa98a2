#!/usr/bin/env bash
# The demo on a real node (hack/demo.sh --node): a local control plane with a node, the
# controller's image built from the Dockerfile and installed with the chart, backends that are
# Deployments with readiness probes; every primary Pod fails its probe, then passes again, and the
# Pods, their readiness and the TrafficSplit weights are shown at each step. Everything is stopped
# and removed at the end, also on Ctrl-C.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
step=""
begin() { step=$*; say "$*"; }
fail() { echo "demo: step '$step' failed: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "demo --node: a node needs root (containerd, kubelet, cgroups, a bridge)" >&2; exit 1; }
bin=$(hack/build-control-plane.sh --node | tail -n 1)
export PATH="$bin:$PATH"

begin "building the kubectl failover plugin and crd-gen"
cargo build --quiet --bin kubectl-failover --bin crd-gen
export PATH="$PWD/target/debug:$PATH"

begin "starting a control plane with a real node (containerd, kubelet, kube-proxy, kube-scheduler)"
cp_out=$(hack/control-plane.sh start --node --owner-pid $$)
eval "$(tail -n 1 <<< "$cp_out")"
cp_dir=$(dirname "$KUBECONFIG")
echo "control plane directory: $cp_dir"
cleanup() {
  local code=$?
  trap - EXIT INT TERM
  say "cleaning up"
  hack/control-plane.sh stop "$cp_dir" || true
  if (( code != 0 )) && [[ -n "$step" ]]; then echo "demo: stopped in step '$step' (exit $code)" >&2; fi
  exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
kubectl get nodes -o wide

begin "building the controller's image from the Dockerfile (buildah, no registry) and importing it"
image=$(hack/images.sh controller | tail -n 1)
ctr --address "$cp_dir/node/containerd.sock" -n k8s.io images import "$image" >/dev/null

begin "installing the CRDs and the chart (helm install fc charts/failover-controller)"
crd-gen --with-traffic-split | kubectl apply -f - >/dev/null
helm install fc charts/failover-controller --set image.repository=localhost/failover-controller \
  --set image.tag=dev --set image.pullPolicy=Never --set watchNamespace=default --set logFormat=plain >/dev/null
kubectl rollout status deployment/fc-failover-controller --timeout=120s

begin "three backends: Deployments of busybox httpd, ready while /www/ready exists"
for name in web web-east web-west; do
  replicas=$([[ $name == web ]] && echo 2 || echo 1)
  sed -e "s/__NAME__/$name/g" -e "s/__REPLICAS__/$replicas/" hack/backend.yaml | kubectl apply -f - >/dev/null
done
for name in web web-east web-west; do kubectl rollout status "deployment/$name" --timeout=120s >/dev/null; done

kubectl apply -f - <<'YAML'
apiVersion: failover.dev/v1alpha1
kind: FailoverPolicy
metadata: {name: web}
spec:
  service: web
  primary: web
  secondaries: [{service: web-east}, {service: web-west}]
YAML

# Waits until the policy's status has taken in the probes' verdict and sends traffic to $1.
show() {
  kubectl wait failoverpolicy/web --for=jsonpath='{.status.activeSummary}'="$1" --timeout=120s >/dev/null \
    || fail "traffic did not move to $1 within 120s"
  kubectl get pods -l 'app in (web,web-east,web-west)' -o wide
  echo
  kubectl failover status web
}
begin "every backend Pod is ready: all traffic goes to the primary"
show web

begin "every primary Pod fails its readiness probe (rm /www/ready inside each)"
for pod in $(kubectl get pods -l app=web -o name); do kubectl exec "$pod" -- rm -f /www/ready; done
show web-east

begin "they pass it again"
for pod in $(kubectl get pods -l app=web -o name); do kubectl exec "$pod" -- touch /www/ready; done
show web

begin "why traffic is where it is (kubectl failover explain-decision web)"
kubectl failover explain-decision web
begin "the controller's log"
kubectl logs deployment/fc-failover-controller | tail -n 8
step=""
