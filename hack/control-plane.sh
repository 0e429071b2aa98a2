#!/usr/bin/env bash
# A local Kubernetes control plane on loopback: etcd, kube-apiserver and kube-controller-manager.
#
#   hack/control-plane.sh start [--owner-pid PID] [--node] [--proxy]   start one; prints
#                                                   `export KUBECONFIG=...` last; --node adds a real
#                                                   node (hack/node.sh) and kube-scheduler, --proxy a
#                                                   real proxy serving a Gateway (hack/proxy.sh)
#   hack/control-plane.sh stop [DIR]                 stop it (DIR defaults to $KUBECONFIG's folder)
#   hack/control-plane.sh stop-component DIR NAME [--kill]   stop etcd|kube-apiserver|kube-controller-manager|traefik|...
#   hack/control-plane.sh start-component DIR NAME           start it again, same ports and data
#   hack/control-plane.sh check-node                 says in one line why this machine cannot host a node
#
# Each instance lives in a fresh temporary directory with its own CA, serving certificate,
# service-account signing key, admin kubeconfig, data and logs, on free ports chosen at start, so
# several can run at once. With --owner-pid, the instance stops itself when that process exits.
# The binaries come from hack/build-control-plane.sh (built on first use).
# APISERVER_PROFILING=true serves kube-apiserver's Go profiles (/debug/pprof, to authorized
# clients only); off by default.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self="$here/$(basename "${BASH_SOURCE[0]}")"
components=(etcd kube-apiserver kube-controller-manager containerd kubelet kube-proxy kube-scheduler traefik)
# shellcheck source=node.sh
source "$here/node.sh"
# shellcheck source=proxy.sh
source "$here/proxy.sh"

log() { echo "control-plane: $*" >&2; }
die() { log "$*"; exit 1; }

free_ports() {
  python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

# Is the process in PID file $2 alive and one of this instance's (its command line names DIR $1)?
ours() {
  local dir=$1 pidfile=$2 pid
  [[ -f "$pidfile" ]] || return 1
  pid=$(cat "$pidfile")
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" | grep -qF -- "$dir"
}

start_component() {
  local dir=$1 name=$2
  [[ -f "$dir/$name.cmd" ]] || die "no such component '$name' in $dir"
  if ours "$dir" "$dir/$name.pid"; then return 0; fi
  # setsid: the component outlives this script and is not hit by signals sent to its caller's group.
  setsid bash -c "exec $(cat "$dir/$name.cmd")" >> "$dir/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$dir/$name.pid"
}

stop_component() {
  local dir=$1 name=$2 signal=${3:-TERM} pid i
  ours "$dir" "$dir/$name.pid" || return 0
  pid=$(cat "$dir/$name.pid")
  kill "-$signal" "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.2
  fi
  rm -f "$dir/$name.pid"
}

wait_ready() {
  local dir=$1 url=$2 what=$3 deadline=$(( $(date +%s) + ${4:-90} ))
  until curl -fsS --max-time 2 --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" "$url" >/dev/null 2>&1; do
    if (( $(date +%s) > deadline )); then
      log "$what did not become ready in time; last log lines:"
      tail -n 20 "$dir/logs/"*.log >&2 || true
      return 1
    fi
    sleep 0.2
  done
}

gen_pki() {
  local pki=$1/pki node_ip=${2:-}
  mkdir -p "$pki"
  (
    cd "$pki"
    key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
    key ca.key
    openssl req -x509 -new -key ca.key -days 3650 -subj "/CN=failover-local-ca" -out ca.crt 2>/dev/null
    key apiserver.key
    openssl req -new -key apiserver.key -subj "/CN=kube-apiserver" -out apiserver.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,IP:10.0.0.1%s,DNS:localhost' "${node_ip:+,IP:$node_ip}" > apiserver.ext
    printf ',DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' >> apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    key admin.key
    openssl req -new -key admin.key -subj "/O=system:masters/CN=local-admin" -out admin.csr 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' > admin.ext
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile admin.ext -out admin.crt 2>/dev/null
    key kubelet-client.key
    openssl req -new -key kubelet-client.key -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" -out kubelet-client.csr 2>/dev/null
    openssl x509 -req -in kubelet-client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile admin.ext -out kubelet-client.crt 2>/dev/null
    key sa.key
    openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
  ) || die "generating certificates with openssl failed"
}

write_kubeconfig() {
  local dir=$1 port=$2 b64
  b64() { base64 -w0 < "$1"; }
  cat > "$dir/admin.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority-data: $(b64 "$dir/pki/ca.crt")
users:
- name: local-admin
  user:
    client-certificate-data: $(b64 "$dir/pki/admin.crt")
    client-key-data: $(b64 "$dir/pki/admin.key")
contexts:
- name: local
  context:
    cluster: local
    user: local-admin
    namespace: default
current-context: local
EOF
}

cmd_start() {
  local owner="" node="" proxy=""
  while (( $# )); do
    case $1 in
      --owner-pid) owner=$2; shift 2 ;;
      --node) node=1; shift ;;
      --proxy) proxy=1; shift ;;
      *) die "unknown option '$1'" ;;
    esac
  done
  local bin started dir etcd_port peer_port api_port q
  bin=$("$here/build-control-plane.sh" ${node:+--node} ${proxy:+--proxy} | tail -n 1) || die "building the control-plane binaries failed"
  started=$(date +%s.%N)
  dir=$(mktemp -d "${TMPDIR:-/tmp}/failover-cp.XXXXXX")
  mkdir -p "$dir/logs" "$dir/etcd-data"
  read -r etcd_port peer_port api_port <<< "$(free_ports 3)"
  local bind=127.0.0.1 advertise=127.0.0.1 extra_api=() admission=(--disable-admission-plugins=ServiceAccount) controllers=garbage-collector-controller,namespace-controller,endpointslice-controller,serviceaccount-controller,serviceaccount-token-controller,clusterrole-aggregation-controller,resourcequota-controller
  if [[ -n "$node" ]]; then
    node_network "$dir" > "$dir/node.env" || die "no free /24 for the node's Pods"
    source "$dir/node.env"
    # Pods reach the API server through the kubernetes Service, at the node's address.
    bind=0.0.0.0 advertise=$NODE_IP
    admission=()
    extra_api=(--kubelet-preferred-address-types=InternalIP --kubelet-client-certificate="$dir/pki/kubelet-client.crt" --kubelet-client-key="$dir/pki/kubelet-client.key")
    controllers+=,deployment-controller,replicaset-controller,pod-garbage-collector-controller,disruption-controller,root-ca-certificate-publisher-controller,node-lifecycle-controller,horizontal-pod-autoscaler-controller
  fi
  gen_pki "$dir" "${NODE_IP:-}"
  write_kubeconfig "$dir" "$api_port"
  q() { printf '%q ' "$@"; }
  q "$bin/etcd" --name=local --data-dir="$dir/etcd-data" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-cluster="local=http://127.0.0.1:$peer_port" --unsafe-no-fsync --quota-backend-bytes=4294967296 \
    --log-level=warn > "$dir/etcd.cmd"
  q "$bin/kube-apiserver" --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address="$bind" --advertise-address="$advertise" --secure-port="$api_port" "${extra_api[@]}" \
    --cert-dir="$dir/pki/serving" --tls-cert-file="$dir/pki/apiserver.crt" --tls-private-key-file="$dir/pki/apiserver.key" \
    --client-ca-file="$dir/pki/ca.crt" --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$dir/pki/sa.pub" --service-account-signing-key-file="$dir/pki/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 --allow-privileged=true \
    "${admission[@]}" --profiling="${APISERVER_PROFILING:-false}" --v=1 > "$dir/kube-apiserver.cmd"
  q "$bin/kube-controller-manager" --kubeconfig="$dir/admin.kubeconfig" \
    --controllers="$controllers" --horizontal-pod-autoscaler-sync-period=1s --resource-quota-sync-period=5s \
    --service-account-private-key-file="$dir/pki/sa.key" --root-ca-file="$dir/pki/ca.crt" \
    --leader-elect=false --secure-port=0 --profiling=false --v=1 > "$dir/kube-controller-manager.cmd"
  {
    echo "DIR=$dir"
    echo "BIN=$bin"
    echo "ETCD_URL=http://127.0.0.1:$etcd_port"
    echo "APISERVER_URL=https://127.0.0.1:$api_port"
    echo "KUBECONFIG=$dir/admin.kubeconfig"
    if [[ -n "$node" ]]; then cat "$dir/node.env"; fi
  } > "$dir/env"
  if [[ -n "$node" ]]; then node_configs "$dir" "$bin" "$api_port"; fi
  if [[ -n "$proxy" ]]; then proxy_configs "$dir" "$bin"; fi
  if [[ -n "$owner" ]]; then
    # Stop this instance when its owner exits (or when the directory is removed by a stop),
    # also while it is still starting (a node's images can take minutes to build).
    setsid bash -c "while kill -0 $owner 2>/dev/null && [[ -d '$dir' ]]; do sleep 1; done; [[ -d '$dir' ]] && '$self' stop '$dir'" \
      > "$dir/logs/watchdog.log" 2>&1 < /dev/null &
    echo $! > "$dir/watchdog.pid"
  fi

  start_component "$dir" etcd
  local deadline=$(( $(date +%s) + 30 ))
  until curl -fsS --max-time 1 "http://127.0.0.1:$etcd_port/health" >/dev/null 2>&1; do
    if (( $(date +%s) > deadline )); then tail -n 20 "$dir/logs/etcd.log" >&2; cmd_stop "$dir"; die "etcd did not become healthy"; fi
    sleep 0.1
  done
  start_component "$dir" kube-apiserver
  if ! wait_ready "$dir" "https://127.0.0.1:$api_port/readyz" kube-apiserver 120; then cmd_stop "$dir"; die "start failed"; fi
  start_component "$dir" kube-controller-manager
  sleep 0.5
  if ! ours "$dir" "$dir/kube-controller-manager.pid"; then
    tail -n 20 "$dir/logs/kube-controller-manager.log" >&2; cmd_stop "$dir"; die "kube-controller-manager exited at start"
  fi
  if [[ -n "$node" ]] && ! node_start "$dir" "$bin"; then
    cmd_stop "$dir"; die "the node did not start"
  fi
  if [[ -n "$proxy" ]] && ! proxy_start "$dir" "$bin"; then
    cmd_stop "$dir"; die "the proxy did not start"
  fi
  log "ready in $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $started }")s at https://127.0.0.1:$api_port (directory $dir)"
  echo "export KUBECONFIG=$dir/admin.kubeconfig"
}

cmd_stop() {
  local dir=${1:-}
  if [[ -z "$dir" ]]; then
    [[ -n "${KUBECONFIG:-}" ]] || die "usage: stop DIR (or set KUBECONFIG to the instance's admin.kubeconfig)"
    dir=$(dirname "$KUBECONFIG")
  fi
  [[ -f "$dir/env" ]] || die "$dir is not a local control plane directory"
  local c
  stop_component "$dir" traefik
  node_cleanup "$dir"
  for c in kube-controller-manager kube-apiserver etcd; do stop_component "$dir" "$c"; done
  if [[ -f "$dir/watchdog.pid" ]] && [[ "$(cat "$dir/watchdog.pid")" != "$PPID" ]]; then
    kill "$(cat "$dir/watchdog.pid")" 2>/dev/null || true
  fi
  rm -rf "$dir"
  log "stopped and removed $dir"
}

case ${1:-} in
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  stop-component)
    [[ $# -ge 3 ]] || die "usage: stop-component DIR NAME [--kill]"
    [[ " ${components[*]} " == *" $3 "* ]] || die "unknown component '$3' (one of: ${components[*]})"
    stop_component "$2" "$3" "$([[ ${4:-} == --kill ]] && echo KILL || echo TERM)" ;;
  start-component)
    [[ $# -ge 3 ]] || die "usage: start-component DIR NAME"
    [[ " ${components[*]} " == *" $3 "* ]] || die "unknown component '$3' (one of: ${components[*]})"
    start_component "$2" "$3" ;;
  check-node)
    why=$(node_check)
    [[ -z "$why" ]] || die "this machine cannot host a node: $why"
    log "this machine can host a node" ;;
  *) die "usage: $0 start [--owner-pid PID] [--node] [--proxy] | stop [DIR] | stop-component DIR NAME [--kill] | start-component DIR NAME | check-node" ;;
esac
