#!/usr/bin/env bash
# The fleet, simulated on one machine: 3 gateways behind HAProxy, an open loop at 70 % of the
# fleet's capacity, the replicas restarted one by one twice over, and the load balancer's
# overhead (deploy/cmd/fleet says how). Results: bin/fleet/fleet.md and fleet.json.
#   scripts/fleet.sh            (make fleet: ~2-3 minutes)
#   scripts/fleet.sh -short     (make fleet-short, in make test: ~1 minute)
# Extra arguments go to deploy/cmd/fleet (-replicas, -rolls, -load, -body, ...). Needs
# bin/gateway and bin/loadtest (make build), ONNX Runtime, ../shared and HAProxy (installed
# here from Debian when missing and running as root; scripts/setup.sh test installs it too).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PWD/.deps/go/bin:$PATH:/usr/local/go/bin
export ONNXRUNTIME_LIB=${ONNXRUNTIME_LIB:-$PWD/.deps/onnxruntime/libonnxruntime.so}

args=()
for a in "$@"; do args+=("$a"); done
body=../shared/seed/rime_5868.json
if [ ! -f "$body" ]; then
  echo "fleet: SKIP: $body (the article's payload, in ../shared beside the checkout) is missing"
  exit 0
fi
if [ ! -f "$ONNXRUNTIME_LIB" ]; then
  echo "fleet: SKIP: no ONNX Runtime at $ONNXRUNTIME_LIB (scripts/setup-onnxruntime.sh)"
  exit 0
fi
if ! command -v haproxy >/dev/null; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "fleet: installing haproxy (Debian)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends haproxy >/dev/null
  else
    echo "fleet: SKIP: haproxy is not installed (scripts/setup.sh test, or apt-get install haproxy)"
    exit 0
  fi
fi
[ -x bin/gateway ] && [ -x bin/loadtest ] || { echo "fleet: bin/gateway and bin/loadtest are needed (make build)" >&2; exit 1; }
cd deploy
exec go run ./cmd/fleet -gateway ../bin/gateway -loadtest ../bin/loadtest -models ../models \
  -body "../$body" -out ../bin/fleet "${args[@]}"
