#!/usr/bin/env bash
# A real proxy for the local control plane (sourced by hack/control-plane.sh, `start --proxy`):
# Traefik (hack/build-control-plane.sh --proxy) as a plain process on loopback, its Kubernetes
# Gateway API provider reading the control plane with the admin kubeconfig. It claims the
# GatewayClass `traefik`; the Gateway `edge` (namespace `default`) has one HTTP listener, on the
# port of Traefik's entrypoint, that takes routes from every namespace. Traefik reads the
# backends' EndpointSlices and sends each request straight to a ready Pod's address (the node's
# Pods are reachable from the host), by the weights of the HTTPRoute's backendRefs.
#
# The instance's env file gets PROXY_URL (the entrypoint), PROXY_METRICS_URL (Prometheus
# metrics per service and status code) and GATEWAY=default/edge.

PROXY_GATEWAY_CLASS=traefik
PROXY_GATEWAY_NAMESPACE=default
PROXY_GATEWAY=edge

proxy_log() { echo "proxy: $*" >&2; }

# Writes Traefik's command line (one entrypoint for the Gateway's listener, one for metrics and
# /ping, no dashboard, configuration changes applied at once) and its addresses.
proxy_configs() {
  local dir=$1 bin=$2 port metrics
  read -r port metrics <<< "$(free_ports 2)"
  printf '%q ' env -u KUBERNETES_SERVICE_HOST -u KUBERNETES_SERVICE_PORT "KUBECONFIG=$dir/admin.kubeconfig" \
    "$bin/traefik" --global.checkNewVersion=false --global.sendAnonymousUsage=false \
    --log.level=INFO --log.noColor=true --log.filePath="$dir/logs/traefik.log" \
    --entryPoints.web.address="127.0.0.1:$port" --entryPoints.metrics.address="127.0.0.1:$metrics" \
    --providers.providersThrottleDuration=0s --providers.kubernetesGateway=true \
    --providers.kubernetesGateway.statusAddress.ip=127.0.0.1 \
    --metrics.prometheus=true --metrics.prometheus.entryPoint=metrics \
    --metrics.prometheus.addServicesLabels=true --metrics.prometheus.addRoutersLabels=true \
    --ping=true --ping.entryPoint=metrics > "$dir/traefik.cmd"
  {
    echo "PROXY_PORT=$port"
    echo "PROXY_URL=http://127.0.0.1:$port"
    echo "PROXY_METRICS_URL=http://127.0.0.1:$metrics/metrics"
    echo "GATEWAY=$PROXY_GATEWAY_NAMESPACE/$PROXY_GATEWAY"
  } >> "$dir/env"
}

# Installs the Gateway API CRDs, the GatewayClass and the Gateway, starts Traefik, and waits until
# it has programmed the Gateway.
proxy_start() {
  local dir=$1 bin=$2 kubectl deadline
  kubectl=("$bin/kubectl" --kubeconfig "$dir/admin.kubeconfig")
  # shellcheck source=/dev/null
  source "$dir/env"
  "${kubectl[@]}" apply --server-side -f "$bin/gateway-api-$GATEWAY_API_VERSION-standard.yaml" >/dev/null || return 1
  "${kubectl[@]}" wait --for=condition=Established --timeout=60s crd/gateways.gateway.networking.k8s.io \
    crd/httproutes.gateway.networking.k8s.io crd/gatewayclasses.gateway.networking.k8s.io >/dev/null || return 1
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
