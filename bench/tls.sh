#!/usr/bin/env bash
# TLS and API keys, A/B in one run (bench/history.md, "TLS and API keys"): three gateways of
# one binary side by side (plain HTTP, HTTPS, plain HTTP with an API key file), each loaded in
# turn with a closed loop of 50 on the article's payload, ROUNDS times; then a new connection
# per request on /v2/health/ready, plain and HTTPS, for the handshake's cost. The gateway's
# CPU per request comes from /proc/PID/stat. Needs bin/gateway, bin/loadtest (make build),
# openssl, and ../shared/seed/rime_5868.json. Run it alone on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
B=$PWD/bin S=$PWD/../shared/seed/rime_5868.json D=$(mktemp -d)
export ONNXRUNTIME_LIB=${ONNXRUNTIME_LIB:-$PWD/.deps/onnxruntime/libonnxruntime.so}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$D"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$D/tls.key" -out "$D/tls.crt" 2>/dev/null
printf 'keys:\n  - {name: bench, key: bench-key-0123456789abcdef}\n' > "$D/keys.yaml"
model="models:
  - {name: mobilenet_v3_small, path: $PWD/models/mobilenet_v3_small/model.onnx, labels: $PWD/models/mobilenet_v3_small/labels.txt}"
printf '%s\n' "$model" > "$D/plain.yaml"
printf 'server: {tls: {cert_file: %s, key_file: %s}}\n%s\n' "$D/tls.crt" "$D/tls.key" "$model" > "$D/tls.yaml"
printf 'server: {api_keys: {file: %s}}\n%s\n' "$D/keys.yaml" "$model" > "$D/key.yaml"
declare -A addr pid
for n in plain tls key; do
  "$B/gateway" -config "$D/$n.yaml" -listen 127.0.0.1:0 -admin-listen off -grpc-listen off 2> "$D/$n.log" &
  pid[$n]=$!; pids+=($!)
done
for n in plain tls key; do
  for _ in $(seq 100); do grep -q 'msg=serving' "$D/$n.log" && break; sleep 0.1; done
  addr[$n]=$(sed -n 's/.*msg=serving addr=\([^ ]*\).*/\1/p' "$D/$n.log")
done
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
run() { # label gateway loadtest-arguments...
  local label=$1 p=${pid[$2]} c0 c1; shift 2
  c0=$(cpu "$p"); "$B/loadtest" -q -o "$D/r.json" "$@" > /dev/null 2>&1 || true; c1=$(cpu "$p")
  python3 -c "import json,sys; r=json.load(open('$D/r.json'))['results']; ok=max(r['ok_2xx'],1)
print('%-11s %9.1f req/s  ok %6d  errors %4d  p50 %6.1f  p99 %6.1f ms  gateway CPU %.3f ms/req' % ('$label', r['throughput'], r['ok_2xx'], r['errors'], r['latency_ms']['p50'], r['latency_ms']['p99'], ($c1-$c0)*10.0/ok))"
}
load="-c 50 -duration 8s -warmup 2s -body $S -H Content-Type:application/json"
for r in $(seq "$ROUNDS"); do
  echo "round $r, $(uptime | sed 's/.*load/load/')"
  run plain plain $load "http://${addr[plain]}/predict/"
  run https tls $load -cacert "$D/tls.crt" "https://${addr[tls]}/predict/"
  run plain+key key $load -H "X-API-Key: bench-key-0123456789abcdef" "http://${addr[key]}/predict/"
done
conns="-c 8 -duration 5s -warmup 1s -keepalive=false"
for r in $(seq "$ROUNDS"); do
  echo "a connection per request, round $r"
  run plain plain $conns "http://${addr[plain]}/v2/health/ready"
  run https tls $conns -cacert "$D/tls.crt" "https://${addr[tls]}/v2/health/ready"
done
