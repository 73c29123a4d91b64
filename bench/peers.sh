#!/usr/bin/env bash
# Baseline peers for imagegate's benchmarks (see bench/README.md).
#
#   bench/peers.sh setup-torch          apt packages + the state_dict of the default model
#   bench/peers.sh setup-node           apt nodejs/npm if missing + npm ci in bench/node_service
#   bench/peers.sh torch-start PORT     PyTorch + FastAPI, uvicorn --workers $WORKERS; prints PID
#   bench/peers.sh node-start PORT      node http + cluster + sharp + onnxruntime-node; prints PID
#   bench/peers.sh stop PID             SIGTERM the peer (and its workers), wait for it to exit
#   bench/peers.sh ab PORT [N]          the article's benchmark, N requests (200), -c 50
#
# The start commands install what they need first (set SKIP_SETUP=1 to skip), run the service in
# the background in its own session, log to bench/out/<peer>_<PORT>.log, wait until GET /
# answers, and print only the PID (of uvicorn's parent / node's cluster primary) on stdout.
# WORKERS defaults to the number of cores (one worker per core). On a fresh Debian 12 machine
# run them as root or with sudo available (apt-get).
set -euo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
OUT=${BENCH_OUT:-$BENCH/out}
PY=/usr/bin/python3   # Debian's interpreter: python3-torch lives there
WORKERS=${WORKERS:-$(nproc)}
STATE_DICT=$OUT/torch_state_dict.pt
PAYLOAD=${PAYLOAD:-$ROOT/../shared/seed/rime_5868.json}

log() { echo "peers: $*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

apt_install() { # packages that are missing get installed
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get install ${missing[*]}"
  as_root apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
}

setup_torch() {
  apt_install python3-torch python3-torchvision python3-pil python3-fastapi uvicorn curl
  mkdir -p "$OUT"
  # The same weights as models/mobilenet_v3_small/model.onnx (deterministic; see its README).
  log "writing $STATE_DICT"
  "$PY" "$ROOT/scripts/export_model.py" --state-dict-only --save-state-dict "$STATE_DICT" >&2
}

setup_node() {
  command -v node >/dev/null && command -v npm >/dev/null || apt_install nodejs npm
  command -v curl >/dev/null || apt_install curl
  if [ ! -f "$ROOT/models/mobilenet_v3_small/model.onnx" ]; then
    log "models/mobilenet_v3_small/model.onnx is missing: run scripts/export_model.py"; exit 1
  fi
  # --ignore-scripts: onnxruntime-node's install script downloads from a host we may not reach
  # (the CPU library is already in the package); sharp's binaries come from its @img/* packages.
  (cd "$BENCH/node_service" && npm ci --ignore-scripts --no-audit --no-fund >&2)
}

wait_ready() { # $1 port, $2 pid, $3 log
  local i
  for i in $(seq 1 120); do
    if curl -fsS -o /dev/null "http://127.0.0.1:$1/" 2>/dev/null; then return 0; fi
    if ! kill -0 "$2" 2>/dev/null; then
      log "the service exited during start-up; last lines of $3:"; tail -n 20 "$3" >&2; return 1
    fi
    sleep 0.5
  done
  log "no answer on port $1 after 60 s; last lines of $3:"; tail -n 20 "$3" >&2
  kill -TERM "$2" 2>/dev/null || true
  return 1
}

start_bg() { # $1 name, $2 port, $3 dir, rest: command
  local name=$1 port=$2 dir=$3; shift 3
  mkdir -p "$OUT"
  local logf="$OUT/${name}_${port}.log"
  local t0; t0=$(date +%s%N)
  (cd "$dir" && exec setsid "$@" >"$logf" 2>&1 </dev/null) &
  local pid=$!
  echo "$pid" > "$OUT/${name}_${port}.pid"
  wait_ready "$port" "$pid" "$logf"
  log "$name ready on :$port (pid $pid, $(( ($(date +%s%N) - t0) / 1000000 )) ms, log $logf)"
  echo "$pid"
}

torch_start() {
  local port=${1:?usage: peers.sh torch-start PORT}
  [ -n "${SKIP_SETUP:-}" ] || setup_torch
  [ -f "$STATE_DICT" ] || { log "$STATE_DICT is missing (run peers.sh setup-torch)"; exit 1; }
  STATE_DICT="$STATE_DICT" start_bg torch "$port" "$BENCH/torch_service" \
    "$PY" -m uvicorn app:app --host 127.0.0.1 --port "$port" --workers "$WORKERS" --log-level warning
}

node_start() {
  local port=${1:?usage: peers.sh node-start PORT}
  [ -n "${SKIP_SETUP:-}" ] || setup_node
  PORT="$port" WORKERS="$WORKERS" start_bg node "$port" "$BENCH/node_service" node server.js
}

stop_peer() {
  local pid=${1:?usage: peers.sh stop PID}
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  log "pid $pid still running after 10 s; sending SIGKILL to its process group"
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
}

run_ab() {
  local port=${1:?usage: peers.sh ab PORT [N]} n=${2:-200}
  command -v ab >/dev/null || apt_install apache2-utils
  ab -n "$n" -c 50 -p "$PAYLOAD" -T application/json -s 3600 "http://127.0.0.1:$port/predict/"
}

cmd=${1:-}; shift || true
case "$cmd" in
  setup-torch) setup_torch ;;
  setup-node) setup_node ;;
  torch-start) torch_start "$@" ;;
  node-start) node_start "$@" ;;
  stop) stop_peer "$@" ;;
  ab) run_ab "$@" ;;
  *) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
