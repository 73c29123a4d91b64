#!/usr/bin/env bash
# Sizing the Kubernetes requests and limits (docs/deploy.md): peak RSS (VmHWM) and CPU per
# request of one gateway with the Kubernetes ConfigMap's config (2 sessions, 2 decoders, queue
# 256; the model path pointed at the checkout), under bin/loadtest on the article's payload:
# idle, 50 clients (saturation), an open loop at 70 % of that, 400 clients (overload).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x bin/gateway ] && [ -x bin/loadtest ] || { echo "make build first" >&2; exit 1; }
export ONNXRUNTIME_LIB=$PWD/.deps/onnxruntime/libonnxruntime.so
# the ConfigMap's gateway.yaml, out of its block scalar
awk '/^  gateway.yaml: [|]/ {f = 1; next} f {sub(/^    /, ""); print}' deploy/kubernetes/base/configmap.yaml |
  sed -e "s|/app/models|$PWD/models|" > /tmp/k8s-gateway.yaml
log=/tmp/k8s-sizing-gateway.log
bin/gateway -config /tmp/k8s-gateway.yaml -listen 127.0.0.1:0 2>"$log" & pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  port=$(sed -n 's/.*msg=serving addr=127.0.0.1:\([0-9]*\).*/\1/p' "$log")
  [ -n "$port" ] && break
  kill -0 $pid 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "the gateway did not start" >&2; exit 1; }
hwm() { awk '/VmHWM/ {printf "%.0f MiB", $2/1024}' /proc/$pid/status; }
cpu() { awk '{print $14+$15}' /proc/$pid/stat; }
req() { curl -s 127.0.0.1:$port/metrics | awk '/^gateway_batch_items_total/ {s+=$2} END {print s}'; }
echo "idle: VmHWM $(hwm)"
body=(-body ../shared/seed/rime_5868.json http://127.0.0.1:$port/predict/)
c0=$(cpu); r0=$(req)
bin/loadtest -q -c 50 -duration 20s -warmup 2s -o /tmp/k8s-sizing-c50.json "${body[@]}" | grep -E "Throughput|p50"
c1=$(cpu); r1=$(req)
echo "closed loop, 50 clients: VmHWM $(hwm); CPU $(( (c1-c0)*10 )) ms for $((r1-r0)) requests = $(awk -v c=$((c1-c0)) -v r=$((r1-r0)) 'BEGIN {printf "%.1f", c*10/r}') ms per request"
cap=$(awk -F'"throughput": ' '/"throughput"/ {print $2+0; exit}' /tmp/k8s-sizing-c50.json)
rate=$(awk -v c="$cap" 'BEGIN {printf "%.0f", 0.7*c}')
bin/loadtest -q -rate "$rate" -duration 20s -warmup 2s "${body[@]}" | grep -E "Throughput|p50"
echo "open loop at $rate req/s (70 %): VmHWM $(hwm)"
bin/loadtest -q -c 400 -duration 15s "${body[@]}" | grep -E "Throughput|p50|Status"
echo "closed loop, 400 clients (8x the saturating count): VmHWM $(hwm)"
kill $pid; wait $pid || true
