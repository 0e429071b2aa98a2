#!/usr/bin/env bash
# A real node for the local control plane (sourced by hack/control-plane.sh, `start --node`):
# containerd + runc + CNI (bridge, host-local, loopback, portmap) from Debian's packages, and
# kubelet, kube-proxy and kube-scheduler from the Kubernetes module (hack/build-control-plane.sh
# --node). Everything it makes is its own and named after the instance: a bridge and a /24 for
# Pods, a cgroup root in every cgroup v1 hierarchy, containerd's state and runc's root under the
# instance directory, the CNI network's IPAM store, the network namespaces of its Pods and the
# iptables chains of kube-proxy. `node_cleanup` removes all of them.
#
# Settings these hosts need (cgroup v1, an unprivileged oom_score_adj):
#   kubelet: failCgroupV1: false, cgroupDriver: cgroupfs, a cgroupRoot of its own created
#            beforehand in every hierarchy (cpuset.cpus/mems copied from the parent);
#   containerd: restrict_oom_score_adj = true, a pause image built locally (no registry here).
# containerd 1.6 (Debian 12) is the last major version kubelet 1.35 supports; containerd 2.x,
# runc and the CNI plugins also build from the Go module proxy when that changes.

# shellcheck source=versions.env
source "$(dirname "${BASH_SOURCE[0]}")/versions.env"

NODE_PACKAGES=(containerd runc containernetworking-plugins busybox-static iptables conntrack buildah)
CNI_BIN=/usr/lib/cni
# The control plane's Service IPs (kube-apiserver --service-cluster-ip-range).
SERVICE_CIDR=10.0.0.0/24

# The packages whose upstream version is pinned in versions.env.
declare -A NODE_PINS=([containerd]=$CONTAINERD_VERSION [runc]=$RUNC_VERSION
  [containernetworking-plugins]=$CNI_PLUGINS_VERSION [busybox-static]=$BUSYBOX_VERSION
  [buildah]=$BUILDAH_VERSION)
# Where the nodes of this machine reserve their /24 (one directory per subnet).
NODE_RESERVATIONS=/run/failover-nodes

node_log() { echo "node: $*" >&2; }

# Why this machine cannot host a node, in one line; nothing when it can.
node_check() {
  if [[ $(id -u) != 0 ]]; then
    echo "a node needs root (containerd, kubelet, cgroups, a bridge, iptables)"
  elif [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
    echo "this host has cgroup v2 only; the node script sets up cgroup v1 hierarchies (kubelet cgroupRoot per hierarchy)"
  elif [[ ! -d /sys/fs/cgroup/memory || ! -d /sys/fs/cgroup/cpu ]]; then
    echo "no cgroup v1 memory and cpu hierarchies under /sys/fs/cgroup"
  elif ! command -v gcc >/dev/null; then
    echo "gcc is missing (it builds the pause image)"
  elif ! command -v go >/dev/null; then
    echo "go is missing (the pause image's source comes from the Kubernetes module)"
  elif ! command -v apt-get >/dev/null; then
    echo "apt-get is missing (containerd, runc, the CNI plugins and buildah come from Debian's packages)"
  elif ! command -v ip >/dev/null; then
    echo "iproute2 (ip) is missing"
  fi
}

# Installs what the node needs from Debian's packages (once), and checks the pinned versions.
node_install() {
  local missing=() p v
  for p in "${NODE_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if (( ${#missing[@]} > 0 )); then
    node_log "installing ${missing[*]} from Debian's packages"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null
  fi
  for p in "${!NODE_PINS[@]}"; do
    v=$(dpkg-query -W -f='${Version}' "$p")
    v=${v#*:}
    [[ ${v%%[~+-]*} == "${NODE_PINS[$p]}" ]] || {
      node_log "$p is $v, not the pinned ${NODE_PINS[$p]} (hack/versions.env); update the pin after testing the new version"
      return 1
    }
  done
}

# Picks the node's network: bridge name, /24 and the node's IP (the bridge's address).
node_network() {
  local dir=$1 id n
  id=$(basename "$dir" | tr -cd 'a-zA-Z0-9' | tail -c 6 | tr 'A-Z' 'a-z')
  mkdir -p "$NODE_RESERVATIONS"
  for n in $(seq 10 250); do
    ip route show | grep -q "^10.243.$n.0/24" && continue
    # mkdir is atomic: two nodes starting at once never take the same /24.
    mkdir "$NODE_RESERVATIONS/10.243.$n.0" 2>/dev/null || continue
    echo "$dir" > "$NODE_RESERVATIONS/10.243.$n.0/owner"
    echo "NODE_ID=$id"
    echo "NODE_BRIDGE=fo$id"
    echo "NODE_SUBNET=10.243.$n.0/24"
    echo "NODE_IP=10.243.$n.1"
    return 0
  done
  return 1
}

# A cgroup root of the node's own in every cgroup v1 hierarchy.
node_cgroups() {
  local root=$1 h
  for h in /sys/fs/cgroup/*/; do
    [[ -d "$h" && ! -L "${h%/}" ]] || continue
    mkdir -p "$h$root" 2>/dev/null || continue
    if [[ -f "${h}cpuset.cpus" ]]; then
      cat "${h}cpuset.cpus" > "$h$root/cpuset.cpus"
      cat "${h}cpuset.mems" > "$h$root/cpuset.mems"
    fi
  done
}

node_configs() {
  local dir=$1 bin=$2 api_port=$3 n=$dir/node
  mkdir -p "$n"/{cni,containerd,kubelet,logs,images}
  cat > "$n/cni/10-failover.conflist" <<CONF
{"cniVersion": "0.4.0", "name": "failover-$NODE_ID", "plugins": [
  {"type": "bridge", "bridge": "$NODE_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$NODE_SUBNET", "gateway": "$NODE_IP"}]],
            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$n/cni-ipam"}},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "loopback"}]}
CONF
  cat > "$n/containerd.toml" <<CONF
version = 2
root = "$n/containerd/root"
state = "$n/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$n/containerd.sock"
[ttrpc]
  address = "$n/containerd.sock.ttrpc"
[debug]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$n/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:latest"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$n/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$n/cni"
CONF
  local kubelet_port healthz_port proxy_healthz proxy_metrics
  read -r kubelet_port healthz_port proxy_healthz proxy_metrics <<< "$(free_ports 4)"
  cat > "$n/kubelet.yaml" <<CONF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz_port
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $dir/pki/ca.crt}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: /failover-$NODE_ID
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$n/containerd.sock
resolvConf: $n/resolv.conf
# A test machine's disk is shared and may be nearly full: only a disk about to fill evicts, since
# a node under disk pressure is tainted and schedules no Pod.
evictionHard: {memory.available: "50Mi", nodefs.available: "256Mi", imagefs.available: "256Mi", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
syncFrequency: 5s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 2s
makeIPTablesUtilChains: false
CONF
  : > "$n/resolv.conf"
  echo "nameserver 127.0.0.1" > "$n/resolv.conf"
  local q
  q() { printf '%q ' "$@"; }
  q /usr/bin/containerd --config "$n/containerd.toml" > "$dir/containerd.cmd"
  q "$bin/kubelet" --config="$n/kubelet.yaml" --kubeconfig="$dir/admin.kubeconfig" \
    --root-dir="$n/kubelet" --cert-dir="$n/kubelet/pki" --hostname-override="node-$NODE_ID" \
    --node-ip="$NODE_IP" --v=1 > "$dir/kubelet.cmd"
  q "$bin/kube-proxy" --kubeconfig="$dir/admin.kubeconfig" --hostname-override="node-$NODE_ID" \
    --proxy-mode=iptables --cluster-cidr="$NODE_SUBNET" --conntrack-max-per-core=0 \
    --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
    --metrics-bind-address="127.0.0.1:$proxy_metrics" --healthz-bind-address="127.0.0.1:$proxy_healthz" --v=1 > "$dir/kube-proxy.cmd"
  q "$bin/kube-scheduler" --kubeconfig="$dir/admin.kubeconfig" --leader-elect=false \
    --secure-port=0 --v=1 > "$dir/kube-scheduler.cmd"
}

# The node's bridge, up with the node's IP, and forwarding on (restored at cleanup). Pods stay on
# this machine: traffic from the Pod subnet may only go to the bridge (kube-proxy's DNAT to the
# node's own address happens before), and Service IPs that nothing translated are refused rather
# than routed out.
node_bridge() {
  local n=$1/node tag="failover-$NODE_ID"
  ip link add "$NODE_BRIDGE" type bridge 2>/dev/null || true
  ip addr add "$NODE_IP/24" dev "$NODE_BRIDGE" 2>/dev/null || true
  ip link set "$NODE_BRIDGE" up
  sysctl -n net.ipv4.ip_forward > "$n/ip_forward.before"
  sysctl -qw net.ipv4.ip_forward=1
  iptables -I FORWARD -s "$NODE_SUBNET" ! -o "$NODE_BRIDGE" -m comment --comment "$tag" -j REJECT
  iptables -I FORWARD -d "$SERVICE_CIDR" -m comment --comment "$tag" -j REJECT
  iptables -I OUTPUT -d "$SERVICE_CIDR" -m comment --comment "$tag" -j REJECT
}

# Removes the guard rules of node_bridge.
node_guard_cleanup() {
  local rule
  iptables-save -t filter | grep -- "^-A " | grep -F -- "--comment failover-$NODE_ID" | while read -r rule; do
    eval "iptables ${rule/#-A/-D}"
  done
}

# The images the node runs, built without a registry: the pause image (from the Kubernetes
# module's build/pause/linux/pause.c) and the test backend (busybox httpd with a CGI script that
# answers with the backend's name, or 500 for a share of requests; beside it hack/testbackend,
# answering with the name over gRPC, TLS and TCP), as OCI archives cached beside the binaries.
# The archive's name carries the backend's revision: a changed backend is rebuilt.
NODE_BACKEND_ARCHIVE=backend-5.tar
node_images() {
  local bin=$1 cache=$1/../images src
  mkdir -p "$cache"
  if [[ ! -s "$cache/pause.tar" ]]; then
    src=$(go env GOMODCACHE)/k8s.io/kubernetes@v$K8S_VERSION
    node_image "$cache" pause "$src/build/pause/linux/pause.c" || return 1
  fi
  [[ -s "$cache/$NODE_BACKEND_ARCHIVE" ]] || node_image "$cache" backend || return 1
  echo "$cache"
}

# Builds one image with buildah (chroot isolation, vfs storage: no daemon, no registry).
node_image() {
  local cache=$1 name=$2 ctx
  ctx=$(mktemp -d)
  case $name in
    pause)
      gcc -static -O2 -o "$ctx/pause" "$3" || { rm -rf "$ctx"; return 1; }
      printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' > "$ctx/Containerfile" ;;
    backend)
      cp /bin/busybox "$ctx/busybox"
      (cd "$here/testbackend" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$ctx/testbackend" .) ||
        { rm -rf "$ctx"; return 1; }
      # GET /cgi-bin/name answers with the backend's name (/www/name), or with a 500 for the
      # share of requests /www/fail-percent asks for; /ready is the readiness probe's file.
      # Above /www/rate-limit requests in one second (0: no limit), it answers 503
      # "<name> overloaded": a Pod that serves at most a known rate.
      cat > "$ctx/name" <<'CGI'
#!/bin/sh
# Shell builtins only: one process per request.
read -r name < /www/name
fail=0 limit=0
[ -r /www/fail-percent ] && read -r fail < /www/fail-percent
[ -r /www/rate-limit ] && read -r limit < /www/rate-limit
if [ "${limit:-0}" -gt 0 ]; then
  # This second's requests, one line each in its own file (appends of a line do not mix).
  read -r up _ < /proc/uptime
  second=/tmp/second-${up%.*}
  echo >> "$second"
  count=0
  while read -r _; do count=$((count + 1)); done < "$second"
  if [ "$count" -gt "$limit" ]; then
    printf 'HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n%s overloaded\n' "$name"
    exit 0
  fi
fi
if [ $((RANDOM % 100)) -lt "${fail:-0}" ]; then
  printf 'HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n%s failed\n' "$name"
else
  printf 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n%s\n' "$name"
fi
CGI
      chmod 755 "$ctx/name"
      printf '%s\n' 'FROM scratch' 'COPY busybox /bin/busybox' \
        'RUN ["/bin/busybox", "--install", "-s", "/bin"]' \
        'RUN ["/bin/busybox", "mkdir", "-p", "/www/cgi-bin", "/tmp"]' \
        'RUN ["/bin/busybox", "sh", "-c", "echo ok > /www/index.html"]' \
        'COPY name /www/cgi-bin/name' 'COPY testbackend /bin/testbackend' \
        'ENTRYPOINT ["/bin/busybox", "httpd", "-f", "-p", "8080", "-h", "/www"]' > "$ctx/Containerfile" ;;
  esac
  node_buildah "$cache" bud --isolation chroot -t "localhost/$name:latest" "$ctx" >/dev/null || { rm -rf "$ctx"; return 1; }
  local archive=$name.tar
  [[ $name == backend ]] && archive=$NODE_BACKEND_ARCHIVE
  node_buildah "$cache" push "localhost/$name:latest" "oci-archive:$cache/$archive:localhost/$name:latest" >/dev/null
  rm -rf "$ctx"
}

node_buildah() {
  local cache=$1; shift
  STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot buildah --root "$cache/storage" --runroot "$cache/run" "$@"
}

# Imports an OCI archive into the node's containerd.
node_import() {
  local dir=$1 archive=$2
  ctr --address "$dir/node/containerd.sock" -n k8s.io images import --all-platforms "$archive" >/dev/null
}

node_start() {
  local dir=$1 bin=$2 images deadline
  node_install || return 1
  ls /var/run/netns 2>/dev/null > "$dir/node/netns.before" || : > "$dir/node/netns.before"
  node_bridge "$dir"
  node_cgroups "failover-$NODE_ID"
  start_component "$dir" containerd
  deadline=$(( $(date +%s) + 30 ))
  until ctr --address "$dir/node/containerd.sock" version >/dev/null 2>&1; do
    (( $(date +%s) > deadline )) && { tail -n 20 "$dir/logs/containerd.log" >&2; return 1; }
    sleep 0.2
  done
  images=$(node_images "$bin") || { node_log "building the node's images failed"; return 1; }
  node_import "$dir" "$images/pause.tar" && node_import "$dir" "$images/$NODE_BACKEND_ARCHIVE" || return 1
  echo "NODE_IMAGES=$images" >> "$dir/env"
  start_component "$dir" kube-scheduler
  start_component "$dir" kube-proxy
  start_component "$dir" kubelet
  deadline=$(( $(date +%s) + 60 ))
  until "$bin/kubectl" --kubeconfig "$dir/admin.kubeconfig" get node "node-$NODE_ID" \
      -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -q True; do
    (( $(date +%s) > deadline )) && { tail -n 30 "$dir/logs/kubelet.log" >&2; return 1; }
    sleep 0.2
  done
}

# Removes the masquerade chains the CNI bridge plugin made for this node's network (they stay
# when a sandbox was killed instead of torn down), and the localnet firewall chain kube-proxy
# leaves behind.
node_cni_iptables_cleanup() {
  local chain rule
  for chain in $(iptables-save -t nat | grep -F "failover-$NODE_ID" | sed -n 's/^-A \(CNI-[A-Za-z0-9]*\) .*/\1/p' | sort -u); do
    iptables-save -t nat | grep -- "-j $chain\b" | grep -- "^-A POSTROUTING" | while read -r rule; do
      eval "iptables -t nat ${rule/#-A/-D}"
    done
    iptables -t nat -F "$chain"
    iptables -t nat -X "$chain"
  done
  # The localnet firewall chain is shared too: only the last node removes it.
  if ! pgrep -x kube-proxy >/dev/null; then
    for chain in INPUT OUTPUT; do iptables -D "$chain" -j KUBE-FIREWALL 2>/dev/null; done
    iptables -F KUBE-FIREWALL 2>/dev/null && iptables -X KUBE-FIREWALL 2>/dev/null
  fi
  return 0
}

# Whether a network namespace is this node's: an address of its subnet inside, or no interface
# but loopback (a sandbox torn down without its namespace).
node_owns_netns() {
  local addrs
  addrs=$(ip netns exec "$1" ip -4 -o addr show 2>/dev/null | awk '$2 != "lo" {print $4}')
  [[ -z "$addrs" ]] && ! node_other_running && return 0
  grep -q "^${NODE_SUBNET%.0/24}\." <<< "$addrs"
}

# Whether another node of this machine is running (called once this node's kubelet is stopped).
node_other_running() {
  pgrep -f "/kubelet --config=" >/dev/null
}

# Stops the node and removes everything it made (each step best effort: a subshell without
# errexit, so one thing already gone never stops the rest).
node_cleanup() (
  set +e +o pipefail
  local dir=$1 n=$1/node pid m ns h
  [[ -f "$dir/env" ]] && source "$dir/env"
  [[ -n "${NODE_ID:-}" ]] || return 0
  stop_component "$dir" kube-scheduler
  if ours "$dir" "$dir/kubelet.pid" && [[ -n "${BIN:-}" ]]; then
    # Pods deleted while kubelet runs have their sandboxes torn down through CNI (routes,
    # iptables, network namespaces) as usual.
    "$BIN/kubectl" --kubeconfig "$dir/admin.kubeconfig" delete pods --all -A --force --grace-period=0 --wait=false >/dev/null 2>&1 || true
    for _ in $(seq 1 50); do
      [[ -z "$(ctr --address "$n/containerd.sock" -n k8s.io tasks ls -q 2>/dev/null)" ]] && break
      sleep 0.1
    done
  fi
  stop_component "$dir" kubelet
  stop_component "$dir" kube-proxy
  # kube-proxy's chains are the host's, shared by every node: only the last node removes them.
  if [[ -n "${BIN:-}" ]] && ! pgrep -x kube-proxy >/dev/null; then
    "$BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
  fi
  stop_component "$dir" containerd
  # Whatever survived: processes in the node's cgroups, its shims, mounts, namespaces, bridge.
  for h in /sys/fs/cgroup/*/failover-"$NODE_ID"; do
    [[ -d "$h" ]] || continue
    find "$h" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
  done
  for pid in $(pgrep -f "containerd-shim.*$n" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
  sleep 0.2
  grep -F "$n" /proc/mounts | awk '{print $2}' | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  # The network namespaces of this node's Pods: made since it started and holding an address of
  # its subnet (another node's hold another subnet), or none at all once their sandbox is gone.
  for ns in $(ls /var/run/netns 2>/dev/null); do
    grep -qx "$ns" "$n/netns.before" 2>/dev/null && continue
    node_owns_netns "$ns" || continue
    umount -l "/var/run/netns/$ns" 2>/dev/null || true
    rm -f "/var/run/netns/$ns"
  done
  ip link del "$NODE_BRIDGE" 2>/dev/null || true
  [[ -n "${NODE_SUBNET:-}" ]] && rm -rf "$NODE_RESERVATIONS/${NODE_SUBNET%/24}"
  node_cni_iptables_cleanup
  node_guard_cleanup
  for h in /sys/fs/cgroup/*/failover-"$NODE_ID"; do
    [[ -d "$h" ]] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  [[ -f "$n/ip_forward.before" ]] && sysctl -qw net.ipv4.ip_forward="$(cat "$n/ip_forward.before")"
  return 0
)
