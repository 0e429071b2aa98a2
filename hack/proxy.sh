#!/usr/bin/env bash
# A real proxy for the local control plane (sourced by hack/control-plane.sh, `start --proxy`):
# Traefik (hack/build-control-plane.sh --proxy) as a plain process on loopback, its Kubernetes
# Gateway API provider reading the control plane with the admin kubeconfig. It claims the
# GatewayClass `traefik`; the Gateway `edge` (namespace `default`) has three listeners, each on
# the port of a Traefik entrypoint of its own (Traefik matches a listener to an entrypoint by
# port), each taking routes from every namespace: `http` (HTTPRoute and GRPCRoute; h2c for
# gRPC), `tls` (TLS passthrough: TLSRoute by SNI) and `tcp` (TCPRoute). Traefik reads the
# backends' EndpointSlices and sends each request or connection straight to a ready Pod's address
# (the node's Pods are reachable from the host), by the weights of the route's backendRefs.
#
# Traefik reads TLSRoute and TCPRoute only in their alpha version, only with its experimental
# channel on, and its Gateway provider serves nothing at all while a version it reads is not
# served: the cluster gets the Gateway API's experimental-channel CRDs (which serve both that
# version and v1, which the controller writes), on a fresh cluster, as the channel's admission
# policy refuses experimental CRDs over standard ones.
#
# The instance's env file gets PROXY_URL (the HTTP entrypoint), PROXY_PORT, PROXY_TLS_PORT and
# PROXY_TCP_PORT (the listeners' ports), PROXY_METRICS_URL (Prometheus metrics per service and
# status code), GATEWAY=default/edge and GATEWAY_API_CHANNEL=experimental.

PROXY_GATEWAY_CLASS=traefik
PROXY_GATEWAY_NAMESPACE=default
PROXY_GATEWAY=edge

proxy_log() { echo "proxy: $*" >&2; }

# Writes Traefik's command line (one entrypoint for each of the Gateway's listeners, one for
# metrics and /ping, no dashboard, configuration changes applied at once) and its addresses.
proxy_configs() {
  local dir=$1 bin=$2 port metrics tls tcp
  read -r port metrics tls tcp <<< "$(free_ports 4)"
  printf '%q ' env -u KUBERNETES_SERVICE_HOST -u KUBERNETES_SERVICE_PORT "KUBECONFIG=$dir/admin.kubeconfig" \
    "$bin/traefik" --global.checkNewVersion=false --global.sendAnonymousUsage=false \
    --log.level=INFO --log.noColor=true --log.filePath="$dir/logs/traefik.log" \
    --entryPoints.web.address="127.0.0.1:$port" --entryPoints.metrics.address="127.0.0.1:$metrics" \
    --entryPoints.tls.address="127.0.0.1:$tls" --entryPoints.tcp.address="127.0.0.1:$tcp" \
    --providers.providersThrottleDuration=0s --providers.kubernetesGateway=true \
    --providers.kubernetesGateway.experimentalChannel=true \
    --providers.kubernetesGateway.statusAddress.ip=127.0.0.1 \
    --metrics.prometheus=true --metrics.prometheus.entryPoint=metrics \
    --metrics.prometheus.addServicesLabels=true --metrics.prometheus.addRoutersLabels=true \
    --ping=true --ping.entryPoint=metrics > "$dir/traefik.cmd"
  {
    echo "PROXY_PORT=$port"
    echo "PROXY_URL=http://127.0.0.1:$port"
    echo "PROXY_TLS_PORT=$tls"
    echo "PROXY_TCP_PORT=$tcp"
    echo "PROXY_METRICS_URL=http://127.0.0.1:$metrics/metrics"
    echo "GATEWAY=$PROXY_GATEWAY_NAMESPACE/$PROXY_GATEWAY"
    echo "GATEWAY_API_CHANNEL=experimental"
  } >> "$dir/env"
}

# Installs the Gateway API CRDs, the GatewayClass and the Gateway, starts Traefik, and waits until
# it has programmed the Gateway.
proxy_start() {
  local dir=$1 bin=$2 kubectl deadline
  kubectl=("$bin/kubectl" --kubeconfig "$dir/admin.kubeconfig")
  # shellcheck source=/dev/null
  source "$dir/env"
  "${kubectl[@]}" apply --server-side -f "$bin/gateway-api-$GATEWAY_API_VERSION-$GATEWAY_API_CHANNEL.yaml" >/dev/null || return 1
  "${kubectl[@]}" wait --for=condition=Established --timeout=60s crd/gateways.gateway.networking.k8s.io \
    crd/httproutes.gateway.networking.k8s.io crd/gatewayclasses.gateway.networking.k8s.io \
    crd/grpcroutes.gateway.networking.k8s.io crd/tlsroutes.gateway.networking.k8s.io \
    crd/tcproutes.gateway.networking.k8s.io >/dev/null || return 1
  "${kubectl[@]}" apply -f - >/dev/null <<YAML || return 1
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: $PROXY_GATEWAY_CLASS}
spec: {controllerName: traefik.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: $PROXY_GATEWAY, namespace: $PROXY_GATEWAY_NAMESPACE}
spec:
  gatewayClassName: $PROXY_GATEWAY_CLASS
  listeners:
  - name: http
    protocol: HTTP
    port: $PROXY_PORT
    allowedRoutes: {namespaces: {from: All}}
  - name: tls
    protocol: TLS
    port: $PROXY_TLS_PORT
    tls: {mode: Passthrough}
    allowedRoutes: {namespaces: {from: All}}
  - name: tcp
    protocol: TCP
    port: $PROXY_TCP_PORT
    allowedRoutes: {namespaces: {from: All}}
YAML
  start_component "$dir" traefik
  deadline=$(( $(date +%s) + 90 ))
  until "${kubectl[@]}" -n "$PROXY_GATEWAY_NAMESPACE" get gateway "$PROXY_GATEWAY" \
      -o jsonpath='{.status.conditions[?(@.type=="Programmed")].status}' 2>/dev/null | grep -q True; do
    if (( $(date +%s) > deadline )) || ! ours "$dir" "$dir/traefik.pid"; then
      proxy_log "Traefik did not program the Gateway; last log lines:"
      tail -n 20 "$dir/logs/traefik.log" >&2
      return 1
    fi
    sleep 0.2
  done
  proxy_log "Traefik serves Gateway $PROXY_GATEWAY_NAMESPACE/$PROXY_GATEWAY at $PROXY_URL (metrics $PROXY_METRICS_URL)"
}
