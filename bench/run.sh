#!/usr/bin/env bash
# make bench: the side-by-side benchmark report, docs/benchmarks.md, and the README's performance
# table taken from it (bench/readme.sh).
#
# On this machine, one after another, on the article's payload ../shared/seed/rime_5868.json:
#   1. the article's naive PyTorch + FastAPI service (bench/torch_service)
#   2. a Node.js service: node http + cluster, sharp, onnxruntime-node (bench/node_service)
#   3. the in-process ceiling: our decode + preprocess + inference path, no HTTP (bench/ceiling)
#   4. the gateway with batching off (max_batch_size: 1)
#   5. the gateway with its shipped configuration (configs/gateway.yaml)
#   6. the Node.js service and the shipped configuration again, interleaved round by round
# each warmed up, then RUNS runs of `ab -n N -c 50` and of `loadtest -n N -c 50`; medians. In
# each run of the shipped configuration, the same image also goes through the Open Inference
# Protocol with binary tensor data (`loadtest -protocol v2 -binary`), beside the article's API,
# and over gRPC too (GRPC=0 leaves it out) (`loadtest -protocol grpc`: ModelInfer with the image as a raw
# BYTES element), each with the server's CPU time per request over its runs.
# Then the other tasks (issue 39): a detector and an embedding model, each served by the gateway
# beside the Node.js peer doing the same work and the task's in-process ceiling, interleaved
# round by round (tasks, below). Then the batching matrix: the gateway with batching off, a
# fixed window and the adaptive window, at concurrency 1, 8, 50 and two open-loop rates
# (loadtest sweep, with the mean batch size from /metrics).
#
# The limit: on the same machine, in the same run, the CPU time per image of the decode alone
# (libjpeg-turbo on the article's photo at the DCT scale and window the gateway decodes:
# preprocess's BenchmarkJPEGDecodeAlone) and of the model's run alone at the batch size the
# shipped configuration chose (bench/ceiling's BenchmarkModelAlone), and the images/s they allow
# on the machine's cores if nothing else ran; each server's and the in-process ceiling's ratio
# to it; and a perf profile of the shipped configuration's gateway under load, summed by part of
# its work (bench/perfsummary).
#
# First, start-up as Kubernetes sees it: process start to the first 200 of the readiness URL
# (bin/readytime), STARTS rounds of every server started once in turn: the gateway with an
# empty model cache (a new node), with the entry the start before wrote, and with the cache
# off, and the peers.
#
# Environment: N (requests per run, 2000), RUNS (3), WARM (requests, 400), STEP (matrix step
# duration, 8s), RATES (open-loop rates, "100,250"), STARTS (start-up rounds, 10), OUT
# (docs/benchmarks.md), PEERS=0 to skip the peers (torch, node), ONLY=interleaved for the
# interleaved Node.js rounds alone, ONLY=startup for the start-up rounds alone (printed),
# ONLY=limit for the limit and the profile alone (printed; PERF=0 leaves the profile out),
# ONLY=tasks for the tasks section alone (printed), GRPC=0 to leave out the gRPC row (the Open
# Inference Protocol over gRPC, on the same server), SKIP_SETUP=1 to install nothing (apt, npm
# ci) in the ONLY= runs; for the tasks: TASK_N (requests per round, 400), DETECT_IMAGE and
# EMBED_IMAGE (the photos, ../shared/images/opencv_messi5.jpg and exif_landscape_orient1.jpg).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH=$PATH:/usr/local/go/bin
N=${N:-2000}
RUNS=${RUNS:-3}
WARM=${WARM:-400}
STEP=${STEP:-8s}
RATES=${RATES:-100,250}
STARTS=${STARTS:-10}
REPORT=${OUT:-docs/benchmarks.md}
PEERS=${PEERS:-1}
PAYLOAD=$ROOT/../shared/seed/rime_5868.json
WORK=$ROOT/bench/out/run
PORT=18190
GRPC=${GRPC:-1}
PERF=${PERF:-1}
GRPC_PORT=18191
GRPC_FLAGS=() # the shipped config's gateway listens for gRPC too when GRPC=1
[ "$GRPC" = 1 ] && GRPC_FLAGS=(-grpc-listen "127.0.0.1:$GRPC_PORT")
export ONNXRUNTIME_LIB=${ONNXRUNTIME_LIB:-$ROOT/.deps/onnxruntime/libonnxruntime.so}
# the Makefile's: the ceilings and limits built here (go test -c) with the SIMD kernels the
# gateway's binary has (make exports it; bench/run.sh run by hand would build them without)
export GOEXPERIMENT=${GOEXPERIMENT-simd}
# the gateways' model cache (runtime.cache_dir: auto), this run's own
export XDG_CACHE_HOME=$WORK/cache

[ -f "$PAYLOAD" ] || { echo "bench: $PAYLOAD is missing (../shared must be beside the checkout)" >&2; exit 1; }
if [ -z "${SKIP_SETUP:-}" ] && [ "${ONLY:-}" != startup ] && [ "${ONLY:-}" != tasks ] && { ! command -v ab >/dev/null || ! command -v hey >/dev/null; }; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq apache2-utils hey >/dev/null
fi
make -s build
go build -o bin/readytime ./bench/readytime
rm -rf "$WORK" && mkdir -p "$WORK"
log() { echo "bench: $*" >&2; }

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "-"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# peak RSS (MiB): the sum of VmHWM over the server's processes (its session)
peak_rss() {
  local sid=$1 total=0 p
  for p in $(ps -o pid= -s "$sid" 2>/dev/null); do
    total=$((total + $(awk '/^VmHWM/ {print $2}' /proc/"$p"/status 2>/dev/null || echo 0)))
  done
  echo $((total / 1024))
}

# ready_url NAME: the URL a readiness probe would ask: the gateway's /v2/health/ready, the
# peers' GET / (they listen once their model is loaded)
ready_url() {
  case $1 in torch | node) echo "http://127.0.0.1:$PORT/" ;; *) echo "http://127.0.0.1:$PORT/v2/health/ready" ;; esac
}

# start NAME CMD...: starts a server in its own session, writes its ready time (ms from exec to
# the first 200 of its readiness URL, one start) into $WORK/NAME.startup, and returns once it
# has answered a POST /predict/ too; sets SPID
start() {
  local name=$1; shift
  local t0 t1 url
  url=$(ready_url "$name")
  t0=$(date +%s%N)
  setsid "$@" >"$WORK/$name.log" 2>&1 </dev/null &
  SPID=$!
  for _ in $(seq 1 6000); do
    if curl -fsS -o /dev/null "$url" 2>/dev/null; then
      t1=$(date +%s%N)
      echo $(( (t1 - t0) / 1000000 )) > "$WORK/$name.startup"
      if curl -fsS -o /dev/null -H 'Content-Type: application/json' --data-binary "@$PAYLOAD" "$(URL)"; then
        return 0
      fi
      log "$name is ready but did not answer POST /predict/:"; tail -20 "$WORK/$name.log" >&2; return 1
    fi
    kill -0 "$SPID" 2>/dev/null || { log "$name exited during start-up:"; tail -20 "$WORK/$name.log" >&2; return 1; }
    sleep 0.005
  done
  log "$name was not ready in 30 s"; return 1
}

stop() {
  kill -TERM -- "-$SPID" 2>/dev/null || kill -TERM "$SPID" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$SPID" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL -- "-$SPID" 2>/dev/null || true
}

URL() { echo "http://127.0.0.1:$PORT/predict/"; }

# server_cpu_ticks: the CPU time (utime + stime, clock ticks) of the server's processes (its
# session) so far
server_cpu_ticks() {
  local total=0 p
  for p in $(ps -o pid= -s "$SPID" 2>/dev/null); do
    total=$((total + $(awk '{print $14 + $15}' /proc/"$p"/stat 2>/dev/null || echo 0)))
  done
  echo "$total"
}

# cpu_run NAME CMD...: runs a loadtest command and appends the server's CPU milliseconds per
# request over it to $WORK/NAME.cpu
cpu_run() {
  local name=$1; shift
  local t0 t1
  t0=$(server_cpu_ticks)
  "$@" || true
  t1=$(server_cpu_ticks)
  awk -v d=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v n="$N" 'BEGIN {printf "%.3f\n", d * 1000 / hz / n}' >>"$WORK/$name.cpu"
}

# measure NAME: warm-up, then RUNS x (ab, loadtest); writes $WORK/NAME.row
measure() {
  local name=$1 r
  log "$name: warm-up ($WARM requests)"
  ab -n "$WARM" -c 50 -p "$PAYLOAD" -T application/json -s 600 "$(URL)" >/dev/null 2>&1 || true
  : >"$WORK/$name.ab"; : >"$WORK/$name.lt"
  if [ "$name" = gateway_best ]; then : >"$WORK/gateway_v2.lt"; : >"$WORK/gateway_v2.cpu"; : >"$WORK/gateway_grpc.lt"; : >"$WORK/gateway_grpc.cpu"; fi
  for r in $(seq 1 "$RUNS"); do
    log "$name: run $r/$RUNS"
    ab -n "$N" -c 50 -p "$PAYLOAD" -T application/json -s 600 "$(URL)" >"$WORK/$name.ab.$r" 2>&1 || true
    awk '/^Requests per second/ {rps=$4} /^Failed requests/ {f=$3} /^Non-2xx/ {n=$3} /^  50%/ {p50=$2} /^  99%/ {p99=$2}
         END {print rps, p50, p99, f + n}' "$WORK/$name.ab.$r" >>"$WORK/$name.ab"
    if [ "$name" = gateway_best ]; then
      # the in-process ceiling, right after this round's ab run (the server idles meanwhile),
      # so that each round's pair sees the same state of the machine
      log "in-process ceiling, run $r/$RUNS"
      go test -run '^$' -bench Ceiling -benchtime "${N}x" ./bench/ceiling/ |
        awk '/images\/s/ {for (i=1;i<=NF;i++) if ($(i+1)=="images/s") print $i}' >>"$WORK/ceiling"
    fi
    bin/loadtest -q -n "$N" -c 50 -body "$PAYLOAD" "$(URL)" >"$WORK/$name.lt.$r" 2>&1 || true
    if [ "$name" = gateway_best ]; then
      # the same image as a v2 inference request with binary tensor data, on the same server
      cpu_run gateway_v2 bin/loadtest -q -protocol v2 -binary -model "$MODEL" -n "$N" -c 50 -body "$PAYLOAD" "http://127.0.0.1:$PORT" >"$WORK/gateway_v2.lt.$r" 2>&1
      lt_row "$WORK/gateway_v2.lt.$r" >>"$WORK/gateway_v2.lt"
      if [ "$GRPC" = 1 ]; then
        # and as a gRPC ModelInfer request (the image as a raw BYTES element), on the same server
        cpu_run gateway_grpc bin/loadtest -q -protocol grpc -model "$MODEL" -n "$N" -c 50 -body "$PAYLOAD" "127.0.0.1:$GRPC_PORT" >"$WORK/gateway_grpc.lt.$r" 2>&1
        lt_row "$WORK/gateway_grpc.lt.$r" >>"$WORK/gateway_grpc.lt"
      fi
    fi
    lt_row "$WORK/$name.lt.$r" >>"$WORK/$name.lt"
  done
  local rss; rss=$(peak_rss "$SPID")
  col() { awk -v c="$2" '{print $c}' "$WORK/$name.$1" | median; }
  echo "$(col ab 1) $(col ab 2) $(col ab 3) $(awk '{s+=$4} END {print s+0}' "$WORK/$name.ab") $(col lt 1) $(col lt 2) $(col lt 3) $(awk '{s+=$4} END {print s+0}' "$WORK/$name.lt") $rss $(cat "$WORK/$name.startup")" >"$WORK/$name.row"
  if [ "$name" = gateway_best ]; then # the v2 and gRPC rows: loadtest only, same server and runs
    for name in gateway_v2 gateway_grpc; do
      [ -s "$WORK/$name.lt" ] || continue
      echo "- - - - $(col lt 1) $(col lt 2) $(col lt 3) $(awk '{s+=$4} END {print s+0}' "$WORK/$name.lt") - -" >"$WORK/$name.row"
    done
  fi
}

# lt_row FILE: "req/s p50 p99 errors" from a loadtest summary
lt_row() {
  awk '/^Throughput:/ {rps=$2} /^Errors:/ {e=$2} /^  min/ {for (i=1;i<=NF;i++) {if ($i=="p50") p50=$(i+1); if ($i=="p99") p99=$(i+1)}}
       END {print rps, p50, p99, e}' "$1"
}

gateway_config() { # NAME BATCHING RUNTIME: the shipped config with its (last) model's batching and runtime set; empty: as shipped
  { sed -e "s#\.\./models#$ROOT/models#" -e '/^    batching: /d' -e '/^    runtime: /d' configs/gateway.yaml
    if [ -n "$2" ]; then echo "    batching: $2"; fi
    if [ -n "$3" ]; then echo "    runtime: $3"; fi; } >"$WORK/$1.yaml"
}

SHIPPED_BATCHING=$(sed -n 's/^    batching: //p' configs/gateway.yaml)
MODEL=$(sed -n 's/^  - name: //p' configs/gateway.yaml | head -1)
SHIPPED_RUNTIME=$(sed -n 's/^    runtime: //p' configs/gateway.yaml)
gateway_config gateway_off "{max_batch_size: 1, max_queue_delay: 0s, max_queue_size: 1024}" "$SHIPPED_RUNTIME"
gateway_config gateway_best "$SHIPPED_BATCHING" "$SHIPPED_RUNTIME"
NOCACHE_RUNTIME="{cache_dir: off}" # the shipped runtime settings, if any, with the model cache off
[ -z "$SHIPPED_RUNTIME" ] || NOCACHE_RUNTIME="${SHIPPED_RUNTIME%\}}, cache_dir: off}"
gateway_config gateway_nocache "$SHIPPED_BATCHING" "$NOCACHE_RUNTIME"

# startup: STARTS rounds, each starting every server once in turn (bin/readytime -n 1): the
# gateway's shipped config on an empty model cache, on the entry that start wrote, with the
# cache off; the peers (PEERS=1). Each start's "ms CPU-ms faults" in $WORK/startup.NAME.
STARTUPS=(gateway_cold gateway_warm gateway_nocache)
startup() {
  local r name cmd out
  [ "$PEERS" = 1 ] && STARTUPS+=(torch node)
  for name in "${STARTUPS[@]}"; do : >"$WORK/startup.$name"; done
  for r in $(seq 1 "$STARTS"); do
    for name in "${STARTUPS[@]}"; do
      local before=()
      case $name in
        gateway_cold) before=(-before "rm -rf '$XDG_CACHE_HOME'"); cmd=(bin/gateway -config "$WORK/gateway_best.yaml" -listen "127.0.0.1:$PORT") ;;
        gateway_warm) cmd=(bin/gateway -config "$WORK/gateway_best.yaml" -listen "127.0.0.1:$PORT") ;;
        gateway_nocache) cmd=(bin/gateway -config "$WORK/gateway_nocache.yaml" -listen "127.0.0.1:$PORT") ;;
        torch) cmd=(env -C bench/torch_service STATE_DICT="$ROOT/bench/out/torch_state_dict.pt" /usr/bin/python3 -m uvicorn app:app
                    --host 127.0.0.1 --port "$PORT" --workers "$(nproc)" --log-level warning) ;;
        node) cmd=(env -C bench/node_service "PORT=$PORT" WORKERS="$(nproc)" node server.js) ;;
      esac
      out=$(bin/readytime -n 1 -q -timeout 120s "${before[@]}" -url "$(ready_url "$name")" -- "${cmd[@]}") ||
        { log "start-up of $name failed"; return 1; }
      echo "$out" | awk '{ms=$3; cpu="-"; f="-"; for (i=1;i<=NF;i++) {if ($i=="CPU") cpu=$(i+2); if ($i=="faults") f=$(i+2)}
                          gsub(/;/, "", f); print ms, cpu, f}' >>"$WORK/startup.$name"
    done
    log "start-up round $r/$STARTS: $(for name in "${STARTUPS[@]}"; do printf '%s %s ms  ' "$name" "$(awk 'END {print $1}' "$WORK/startup.$name")"; done)"
  done
}

# startup_row NAME: "median (min-max) | CPU median | faults median" of its starts
startup_row() {
  local f=$WORK/startup.$1
  echo "$(awk '{print $1}' "$f" | median) ($(awk '{print $1}' "$f" | sort -g | head -1)–$(awk '{print $1}' "$f" | sort -g | tail -1)) | $(awk '{print $2}' "$f" | median) | $(awk '{print $3}' "$f" | median)"
}

startup_label() {
  case $1 in
    gateway_cold) echo "imagegate, shipped config, empty model cache (a new node, or cache_dir on a fresh emptyDir: the model is optimized and its batch sizes measured)" ;;
    gateway_warm) echo "imagegate, shipped config, the entry the start before wrote" ;;
    gateway_nocache) echo "imagegate, shipped config, \`cache_dir: off\` (every start optimizes the model)" ;;
    torch) echo "PyTorch + FastAPI, $(nproc) uvicorn workers (GET / answers)" ;;
    node) echo "Node.js: sharp + onnxruntime-node, $(nproc) cluster workers (GET / answers)" ;;
  esac
}

# startup_table: the start-up section's table (markdown)
startup_table() {
  echo "| server | ready ms, median (min–max) | CPU ms at ready, median | minor page faults at ready, median |"
  echo "|---|---|---|---|"
  for name in "${STARTUPS[@]}"; do
    echo "| $(startup_label "$name") | $(startup_row "$name") |"
  done
}

# ONLY=startup: that measurement alone, printed (no report written).
if [ "${ONLY:-}" = startup ]; then
  if [ "$PEERS" = 1 ]; then
    SKIP_SETUP='' bench/peers.sh setup-torch >/dev/null
    bench/peers.sh setup-node >/dev/null
  fi
  startup
  startup_table
  exit 0
fi

# ceiling_rounds: each round's ratio of the shipped config's ab req/s to the ceiling run right
# after it, and their median ("r1, r2, r3; median m"), or "-"
ceiling_rounds() {
  paste -d ' ' <(awk '{print $1}' "$WORK/gateway_best.ab") "$WORK/ceiling" |
    awk '$1 > 0 && $2 > 0 {printf "%.4f\n", $1 / $2}' >"$WORK/ceiling_rounds"
  [ -s "$WORK/ceiling_rounds" ] || { echo -; return; }
  echo "$(awk '{printf "%s%.2f", (NR > 1 ? ", " : ""), $1}' "$WORK/ceiling_rounds"); median $(printf '%.2f' "$(median <"$WORK/ceiling_rounds")")"
}

# median_ratio: the median of the interleaved rounds' ratios (gateway / Node.js), or "-"
median_ratio() {
  local m
  m=$(awk '$1 > 0 && $2 > 0 {printf "%.4f\n", $2 / $1}' "$WORK/interleaved" | median)
  if [ "$m" = - ]; then echo -; else printf '%.2f' "$m"; fi
}

# interleaved: the Node.js service and the shipped config, both up (on two ports), then RUNS+2
# rounds of ab against one and the other, so that both see the same state of a shared machine
# (measured one after the other, minutes apart, they do not: the same binary's throughput
# drifts 10-30 % between runs). Rows "node gateway" (req/s) in $WORK/interleaved.
interleaved() {
  : >"$WORK/interleaved"
  [ "$PEERS" = 1 ] || return 0
  log "Node.js and the shipped config, interleaved"
  local NPORT=$((PORT + 1)) NURL="http://127.0.0.1:$((PORT + 1))/predict/" NPID r n g up=0
  (cd bench/node_service && exec setsid env PORT=$NPORT WORKERS="$(nproc)" node server.js >"$WORK/inode.log" 2>&1 </dev/null) &
  NPID=$! # its own session: stopped with its workers below
  start interleaved bin/gateway -config "$WORK/gateway_best.yaml" -listen 127.0.0.1:$PORT
  for _ in $(seq 1 3000); do
    if curl -fsS -o /dev/null -H 'Content-Type: application/json' --data-binary "@$PAYLOAD" "$NURL" 2>/dev/null; then up=1; break; fi
    kill -0 "$NPID" 2>/dev/null || break
    sleep 0.01
  done
  if [ "$up" = 1 ]; then
    ab -n "$WARM" -c 50 -p "$PAYLOAD" -T application/json -s 600 "$NURL" >/dev/null 2>&1 || true
    ab -n "$WARM" -c 50 -p "$PAYLOAD" -T application/json -s 600 "$(URL)" >/dev/null 2>&1 || true
    for r in $(seq 1 "$((RUNS + 2))"); do
      n=$(ab -n "$N" -c 50 -p "$PAYLOAD" -T application/json -s 600 "$NURL" 2>&1 | awk '/^Requests per second/ {print $4}') || n=0
      g=$(ab -n "$N" -c 50 -p "$PAYLOAD" -T application/json -s 600 "$(URL)" 2>&1 | awk '/^Requests per second/ {print $4}') || g=0
      echo "${n:-0} ${g:-0}" >>"$WORK/interleaved"
      log "round $r: Node.js ${n:-0} req/s, imagegate ${g:-0} req/s"
    done
  else
    log "the Node.js service did not answer on port $NPORT (see $WORK/inode.log): no interleaved rounds"
  fi
  stop
  kill -TERM -- "-$NPID" 2>/dev/null || kill -TERM "$NPID" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$NPID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$NPID" 2>/dev/null || true
}

# tasks: the gateway's other tasks (issue 39), a detector and an embedding model, each on a
# photo of ../shared/images sent as the article's API sends it: the gateway serving the model
# (the task's defaults), the Node.js peer doing the same work (TASK=detect or embed: sharp,
# onnxruntime-node, its own box decoding and NMS, or the L2 normalization; for embed
# FULL_DECODE=1, the photo decoded whole as the gateway's embed default does, not at sharp's
# reduced shrink-on-load scale), both up at once, and the task's in-process ceiling
# (bench/ceiling's BenchmarkDetect or BenchmarkEmbed on the same photo: CEILING_IMAGE). RUNS+2
# rounds of `loadtest -n TASK_N -c 50` against the peer, then the gateway, then the ceiling (the
# servers idle), so that a round's three figures see the same state of the machine. Rows "node gateway ceiling" (images/s) in $WORK/tasks.TASK.
TASK_N=${TASK_N:-400}
DETECT_IMAGE=${DETECT_IMAGE:-$ROOT/../shared/images/opencv_messi5.jpg}
EMBED_IMAGE=${EMBED_IMAGE:-$ROOT/../shared/images/exif_landscape_orient1.jpg}
ULTRAFACE=$ROOT/../shared/models/ultraface-rfb-320/version-RFB-320.onnx
MOBILENETV2=$ROOT/../shared/models/mobilenetv2-12-int8/mobilenetv2-12-int8.onnx
TASKS=(detect embed)

# task_setup TASK: the task's gateway config ($WORK/task_TASK.yaml), body ($WORK/task_TASK.json)
# and the peer's environment (TNODE), the ceiling benchmark's name (TBENCH) and photo (TIMAGE)
task_setup() {
  local t=$1 model
  case $t in
    detect)
      model=$ULTRAFACE TIMAGE=$DETECT_IMAGE TBENCH=Detect
      # the face detector's authors' settings: a stretch to 320x240, (x - 127) / 128, 0.7, 0.3
      cat >"$WORK/task_$t.yaml" <<YAML
models:
  - name: faces
    path: $model
    task: detect
    preprocess: {mode: stretch, mean: [$(awk 'BEGIN {m = 127 / 255; printf "%.9f, %.9f, %.9f", m, m, m}')], std: [$(awk 'BEGIN {s = 128 / 255; printf "%.9f, %.9f, %.9f", s, s, s}')]}
    detect: {score_threshold: 0.7, iou_threshold: 0.3}
YAML
      TNODE=(TASK=detect "MODEL=$model" SCORE=0.7 IOU=0.3) ;;
    embed)
      # MobileNetV2 (int8, pretrained) cut at its pooled features, as the tests cut it
      model=$WORK/features.onnx TIMAGE=$EMBED_IMAGE TBENCH=Embed
      [ -f "$model" ] || echo "{\"src\": \"$MOBILENETV2\", \"dst\": \"$model\"}" | /usr/bin/python3 internal/pilref/cut_mobilenetv2.py >/dev/null
      printf 'models:\n  - name: features\n    path: %s\n    task: embed\n    embed: {normalize: true}\n' "$model" >"$WORK/task_$t.yaml"
      TNODE=(TASK=embed "MODEL=$model" NORMALIZE=1 FULL_DECODE=1) ;;
  esac
  printf '{"image":"%s"}' "$(base64 -w0 "$TIMAGE")" >"$WORK/task_$t.json"
}

# throughput FILE: loadtest's req/s from its summary, 0 when it has none
throughput() { awk '/^Throughput:/ {t=$2} END {print t + 0}' "$1"; }

tasks() {
  local t r n g c NPID up NPORT=$((PORT + 1))
  local NURL="http://127.0.0.1:$((PORT + 1))/predict/"
  for f in "$ULTRAFACE" "$MOBILENETV2" "$DETECT_IMAGE" "$EMBED_IMAGE"; do
    [ -f "$f" ] || { log "tasks: $f is missing: no tasks section"; return 0; }
  done
  go test -c -o "$WORK/ceiling.test" ./bench/ceiling/
  for t in "${TASKS[@]}"; do
    : >"$WORK/tasks.$t"
    task_setup "$t"
    log "tasks: $t ($(basename "$TIMAGE")), the gateway, the Node.js peer and the ceiling, interleaved"
    NPID='' up=0
    if [ "$PEERS" = 1 ]; then
      (cd bench/node_service && exec setsid env PORT=$NPORT WORKERS="$(nproc)" "${TNODE[@]}" node server.js >"$WORK/tnode.$t.log" 2>&1 </dev/null) &
      NPID=$!
    fi
    start "task_$t" bin/gateway -config "$WORK/task_$t.yaml" -listen "127.0.0.1:$PORT" || { [ -z "$NPID" ] || kill -TERM -- "-$NPID" 2>/dev/null; return 1; }
    if [ -n "$NPID" ]; then
      for _ in $(seq 1 3000); do
        if curl -fsS -o /dev/null -H 'Content-Type: application/json' --data-binary "@$WORK/task_$t.json" "$NURL" 2>/dev/null; then up=1; break; fi
        kill -0 "$NPID" 2>/dev/null || break
        sleep 0.01
      done
      [ "$up" = 1 ] || log "tasks: the Node.js peer did not answer (see $WORK/tnode.$t.log): the gateway and the ceiling alone"
      [ "$up" = 0 ] || bin/loadtest -q -n "$WARM" -c 50 -body "$WORK/task_$t.json" "$NURL" >/dev/null 2>&1 || true
    fi
    bin/loadtest -q -n "$WARM" -c 50 -body "$WORK/task_$t.json" "$(URL)" >/dev/null 2>&1 || true
    for r in $(seq 1 "$((RUNS + 2))"); do
      n=0
      if [ "$up" = 1 ]; then
        bin/loadtest -q -n "$TASK_N" -c 50 -body "$WORK/task_$t.json" "$NURL" >"$WORK/tnode.$t.lt.$r" 2>&1 || true
        n=$(throughput "$WORK/tnode.$t.lt.$r")
      fi
      bin/loadtest -q -n "$TASK_N" -c 50 -body "$WORK/task_$t.json" "$(URL)" >"$WORK/tgw.$t.lt.$r" 2>&1 || true
      g=$(throughput "$WORK/tgw.$t.lt.$r")
      c=$(cd bench/ceiling && CEILING_IMAGE=$TIMAGE "$WORK/ceiling.test" -test.run '^$' -test.bench "^Benchmark$TBENCH\$" -test.benchtime "${TASK_N}x" 2>&1 |
        awk '/images\/s/ {for (i = 1; i <= NF; i++) if ($(i + 1) == "images/s") print $i}')
      echo "$n $g ${c:-0}" >>"$WORK/tasks.$t"
      log "tasks: $t round $r: Node.js $n, imagegate $g, ceiling ${c:-0} images/s"
    done
    curl -fsS "http://127.0.0.1:$PORT/metrics" | awk '$1 ~ /^gateway_max_batch_size\{/ {print $2; exit}' >"$WORK/tasks.$t.batch" || true
    stop
    if [ -n "$NPID" ]; then
      kill -TERM -- "-$NPID" 2>/dev/null || kill -TERM "$NPID" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$NPID" 2>/dev/null || break; sleep 0.1; done
      kill -KILL -- "-$NPID" 2>/dev/null || true
    fi
  done
}

# tasks_ratio TASK COLUMN: the median of the rounds' ratios of the gateway to column COLUMN of
# $WORK/tasks.TASK (1 the Node.js peer, 3 the ceiling), or "-"
tasks_ratio() {
  local m
  m=$(awk -v c="$2" '$2 > 0 && $c > 0 {printf "%.4f\n", $2 / $c}' "$WORK/tasks.$1" | median)
  if [ "$m" = - ]; then echo -; else printf '%.3f' "$m"; fi
}

# tasks_section: the tasks' rounds and ratios, Markdown
tasks_section() {
  local t r n g c
  echo "A detector and an embedding model, each served alone by the gateway with the task's defaults,"
  echo "beside the Node.js peer doing the same work and the task's in-process ceiling. The detector is"
  echo "../shared's ultraface-rfb-320 (boxes and scores, batch fixed at 1; stretch to 320x240, (x - 127) / 128,"
  echo "score above 0.7, NMS at IoU 0.3) on \`$(basename "$DETECT_IMAGE")\`; the embedding model the shared"
  echo "int8 MobileNetV2 cut at its pooled features (\`embed: {normalize: true}\`, full decode) on"
  echo "\`$(basename "$EMBED_IMAGE")\`, each photo as base64 in the article's JSON. Each round: \`bin/loadtest -n $TASK_N -c 50\`"
  echo "against the Node.js peer (\`TASK=detect\` / \`TASK=embed NORMALIZE=1 FULL_DECODE=1\`, $(nproc) cluster workers,"
  echo "sharp + onnxruntime-node, its own box decoding, NMS and normalization; for embed the photo decoded whole"
  echo "before the resize, as the gateway's full decode, not at sharp's reduced shrink-on-load scale), then the"
  echo "gateway, then the ceiling (bench/ceiling's \`BenchmarkDetect\` / \`BenchmarkEmbed\`, \`-benchtime ${TASK_N}x\`,"
  echo "\`CEILING_IMAGE\` the same photo: the same decode, preprocessing, model and post-processing, one session"
  echo "per core, no HTTP), both servers up throughout (images/s):"
  for t in "${TASKS[@]}"; do
    [ -s "$WORK/tasks.$t" ] || continue
    echo
    echo "| $t round | Node.js | imagegate | ceiling | imagegate / ceiling | imagegate / Node.js |"
    echo "|---|---|---|---|---|---|"
    r=0
    while read -r n g c; do
      r=$((r + 1))
      echo "| $r | $n | $g | $c | $(awk -v a="$g" -v b="$c" 'BEGIN {if (a > 0 && b > 0) printf "%.3f", a / b; else print "-"}') | $(awk -v a="$g" -v b="$n" 'BEGIN {if (a > 0 && b > 0) printf "%.3f", a / b; else print "-"}') |"
    done <"$WORK/tasks.$t"
    echo "| **median of the rounds' ratios** | | | | **$(tasks_ratio "$t" 3)** | **$(tasks_ratio "$t" 1)** |"
  done
  echo
  echo "The gateway's max_batch_size (auto, from its measurement at start-up): detect $(cat "$WORK/tasks.detect.batch" 2>/dev/null),"
  echo "embed $(cat "$WORK/tasks.embed.batch" 2>/dev/null) (the detector's batch axis is fixed at 1). The issue's targets: imagegate ≥ 0.95 of"
  echo "its ceiling and ≥ 2x the Node.js peer, for each task."
}

# chosen_batch: the max_batch_size the running gateway's default model has (auto chose it)
chosen_batch() {
  curl -fsS "http://127.0.0.1:$PORT/metrics" | awk -v m="$MODEL" '$1 ~ /^gateway_max_batch_size\{/ && index($1, "model=\"" m "\"") {print $2; exit}'
}

# profile NAME: a perf profile of the running server (its session's processes) over one
# `loadtest -n N -c 50` run, summed by part of its work into $WORK/NAME.perf.md (a Markdown
# table, bench/perfsummary), with the server's CPU time per request; nothing when perf cannot
# record here (it is Debian's linux-perf; apt-get install linux-perf).
profile() {
  local name=$1 pids t0 t1 ppid cpu
  : >"$WORK/$name.perf.md"
  [ "$PERF" = 1 ] || return 0
  command -v perf >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null 2>&1 || true
  command -v perf >/dev/null || { log "perf is not installed: no profile"; return 0; }
  pids=$(ps -o pid= -s "$SPID" | tr -s ' \n' ',' | sed 's/^,//; s/,$//')
  log "$name: perf profile over one loadtest run"
  perf record -q -e cpu-clock -F 999 -p "$pids" -o "$WORK/$name.perf.data" >"$WORK/$name.perf.log" 2>&1 &
  ppid=$!
  sleep 0.5
  t0=$(server_cpu_ticks)
  bin/loadtest -q -n "$N" -c 50 -body "$PAYLOAD" "$(URL)" >"$WORK/$name.perf.lt" 2>&1 || true
  t1=$(server_cpu_ticks)
  kill -INT "$ppid" 2>/dev/null || true
  wait "$ppid" 2>/dev/null || true
  cpu=$(awk -v d=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v n="$N" 'BEGIN {printf "%.3f", d * 1000 / hz / n}')
  echo "$cpu" >"$WORK/$name.perf.cpu"
  if ! perf report -i "$WORK/$name.perf.data" --stdio --no-children --sort dso,sym -F overhead,dso,sym --field-separator '|' --percent-limit 0 2>/dev/null |
      go run ./bench/perfsummary -cpu-per-image "$cpu" >"$WORK/$name.perf.md" 2>>"$WORK/$name.perf.log"; then
    log "perf report failed (see $WORK/$name.perf.log): no profile"
    : >"$WORK/$name.perf.md"
  fi
}

# limit BATCH: the decode alone and the model alone at BATCH, RUNS times each, alternating; the
# fastest run's CPU µs per image of each (other processes on the machine only add to a run's
# CPU time: they take its caches and memory bandwidth) and the images/s they allow on this
# machine's cores, "decode_us model_us batch images_per_s" in $WORK/limit
limit() {
  local batch=$1 r
  log "the limit: the decode alone, the model alone at batch $batch"
  go test -c -o "$WORK/preprocess.test" ./preprocess/
  go test -c -o "$WORK/ceiling.test" ./bench/ceiling/
  : >"$WORK/limit.decode"; : >"$WORK/limit.model"
  cpu_us() { awk '{for (i=1;i<=NF;i++) if ($(i+1)=="cpu-µs/image") print $i}'; }
  for r in $(seq 1 "$RUNS"); do
    (cd preprocess && "$WORK/preprocess.test" -test.run '^$' -test.bench 'JPEGDecodeAlone$' -test.benchtime 400x) | cpu_us >>"$WORK/limit.decode"
    (cd bench/ceiling && LIMIT_BATCH=$batch "$WORK/ceiling.test" -test.run '^$' -test.bench 'ModelAlone$' -test.benchtime "$(( (400 + batch - 1) / batch ))x") |
      cpu_us >>"$WORK/limit.model"
  done
  local d m
  d=$(sort -g "$WORK/limit.decode" | head -1)
  m=$(sort -g "$WORK/limit.model" | head -1)
  echo "$d $m $batch $(awk -v d="$d" -v m="$m" -v c="$(nproc)" 'BEGIN {if (d + m > 0) printf "%.1f", c * 1e6 / (d + m); else print "-"}')" >"$WORK/limit"
}

# limit_section: the limit and the profile, Markdown
limit_section() {
  local d m b l
  read -r d m b l <"$WORK/limit"
  echo "The cost per image of the two heavy libraries alone, on one core, in this run: libjpeg-turbo's decode"
  echo "of the article's photo at the DCT scale and window the gateway decodes ($d µs of CPU, the fastest of $RUNS"
  echo "runs of \`BenchmarkJPEGDecodeAlone\` in preprocess) and the model's run at the batch size the shipped"
  echo "configuration chose, $b ($m µs per image, \`BenchmarkModelAlone\` in bench/ceiling). If nothing else ran,"
  echo "$(nproc) cores would serve **$l images/s**: the limit the ratios below are taken to. The rest of a"
  echo "request's work (the resize, HTTP, the Go runtime, the kernel) and the load generator on the same cores"
  echo "make up the difference."
  if [ -s "$WORK/gateway_best.perf.md" ]; then
    echo
    echo "Where the shipped configuration's CPU time went under load: a perf profile of the gateway's"
    echo "process (\`perf record -e cpu-clock -F 999 -p PID\`) over one \`loadtest -n $N -c 50\` run, summed by"
    echo "part (bench/perfsummary); the server's CPU time was $(cat "$WORK/gateway_best.perf.cpu") ms per request over that run"
    echo "($(awk '/^Throughput:/ {print $2}' "$WORK/gateway_best.perf.lt") req/s):"
    echo
    cat "$WORK/gateway_best.perf.md"
  fi
}

# ONLY=limit: the limit and the profile alone, printed (no report written).
if [ "${ONLY:-}" = limit ]; then
  start gateway_best bin/gateway -config "$WORK/gateway_best.yaml" -listen 127.0.0.1:$PORT
  ab -n "$WARM" -c 50 -p "$PAYLOAD" -T application/json -s 600 "$(URL)" >/dev/null 2>&1 || true
  BATCH=$(chosen_batch)
  grep -h 'batch size chosen' "$WORK/gateway_best.log" >&2 || true
  profile gateway_best
  stop
  limit "$BATCH"
  limit_section
  l=$(awk '{print $4}' "$WORK/limit")
  echo
  echo "loadtest during the profile: $(awk '/^Throughput:/ {print $2}' "$WORK/gateway_best.perf.lt" 2>/dev/null) req/s, / limit: $(awk -v a="$(awk '/^Throughput:/ {print $2}' "$WORK/gateway_best.perf.lt" 2>/dev/null)" -v l="$l" 'BEGIN {if (l > 0 && a > 0) printf "%.2f", a / l; else print "-"}')"
  exit 0
fi

# ONLY=interleaved: that measurement alone, printed (no report written).
if [ "${ONLY:-}" = interleaved ]; then
  [ "$PEERS" = 1 ] || { echo "bench: ONLY=interleaved measures the Node.js peer: PEERS=0 leaves nothing to do" >&2; exit 1; }
  [ -n "${SKIP_SETUP:-}" ] || bench/peers.sh setup-node >/dev/null
  interleaved
  awk '{printf "Node.js %s req/s, imagegate %s req/s, ratio %.2f\n", $1, $2, $2 / $1}' "$WORK/interleaved"
  [ -s "$WORK/interleaved" ] || exit 1
  echo "median ratio: $(median_ratio)"
  exit 0
fi

# ONLY=tasks: that measurement alone, printed (no report written).
if [ "${ONLY:-}" = tasks ]; then
  [ "$PEERS" = 1 ] && [ -z "${SKIP_SETUP:-}" ] && bench/peers.sh setup-node >/dev/null
  tasks
  tasks_section
  exit 0
fi

servers=()
if [ "$PEERS" = 1 ]; then
  SKIP_SETUP='' bench/peers.sh setup-torch >/dev/null
  bench/peers.sh setup-node >/dev/null
fi
log "start-up: $STARTS rounds"
startup
if [ "$PEERS" = 1 ]; then
  export STATE_DICT=$ROOT/bench/out/torch_state_dict.pt
  (cd bench/torch_service && start torch /usr/bin/python3 -m uvicorn app:app --host 127.0.0.1 --port $PORT --workers "$(nproc)" --log-level warning) || exit 1
  SPID=$(pgrep -f "uvicorn app:app --host 127.0.0.1 --port $PORT" | head -1)
  measure torch; stop
  (cd bench/node_service && start node env PORT=$PORT WORKERS="$(nproc)" node server.js) || exit 1
  SPID=$(pgrep -f "node server.js" | head -1)
  measure node; stop
  servers+=(torch node)
fi
start gateway_off bin/gateway -config "$WORK/gateway_off.yaml" -listen 127.0.0.1:$PORT
measure gateway_off; stop
go test -c -o /dev/null ./bench/ceiling/ # compiled before it is timed
: >"$WORK/ceiling"
start gateway_best bin/gateway -config "$WORK/gateway_best.yaml" -listen 127.0.0.1:$PORT "${GRPC_FLAGS[@]}"
measure gateway_best
BATCH=$(chosen_batch)
profile gateway_best
stop
limit "$BATCH"
servers+=(gateway_off gateway_best gateway_v2)
[ "$GRPC" = 1 ] && servers+=(gateway_grpc)

# The load generator against ab and hey, on the same target, one after another; and its own
# CPU use at an open-loop 1,000 req/s (GET /, which the gateway answers at that rate).
log "load generators side by side"
start tools bin/gateway -config "$WORK/gateway_best.yaml" -listen 127.0.0.1:$PORT
ab -n "$WARM" -c 50 -p "$PAYLOAD" -T application/json "$(URL)" >/dev/null 2>&1 || true
: >"$WORK/tools"
for r in $(seq 1 "$RUNS"); do
  a=$(ab -n "$N" -c 50 -p "$PAYLOAD" -T application/json -s 600 "$(URL)" 2>&1 | awk '/^Requests per second/ {print $4}') || a=-
  h=$(hey -n "$N" -c 50 -m POST -D "$PAYLOAD" -T application/json "$(URL)" 2>&1 | awk '/Requests\/sec/ {print $2}') || h=-
  l=$(bin/loadtest -q -n "$N" -c 50 -body "$PAYLOAD" "$(URL)" 2>&1 | awk '/^Throughput:/ {print $2}') || l=-
  echo "$a $h $l" >>"$WORK/tools"
done
bin/loadtest -q -rate 1000 -duration 10s -c 100 "http://127.0.0.1:$PORT/" >"$WORK/loadtest_cpu.txt" 2>&1 || true
stop

CEILING=$(median <"$WORK/ceiling")

interleaved
tasks

# The batching matrix.
gateway_config mx_off "{max_batch_size: 1, max_queue_delay: 0s, max_queue_size: 1024}" "$SHIPPED_RUNTIME"
gateway_config mx_shipped "$SHIPPED_BATCHING" "$SHIPPED_RUNTIME"
gateway_config mx_fixed32 "{max_batch_size: 32, max_queue_delay: 2ms, max_queue_size: 1024}" "$SHIPPED_RUNTIME"
gateway_config mx_adaptive "{max_batch_size: 32, max_queue_size: 1024, adaptive: {latency_target: 50ms}}" "$SHIPPED_RUNTIME"
for cfg in mx_off mx_shipped mx_fixed32 mx_adaptive; do
  start "$cfg" bin/gateway -config "$WORK/$cfg.yaml" -listen 127.0.0.1:$PORT
  log "$cfg: closed-loop sweep"
  bin/loadtest sweep -q -c 1,8,50 -duration "$STEP" -warmup 1s -body "$PAYLOAD" -metrics "http://127.0.0.1:$PORT/metrics" \
    -o "$WORK/$cfg.closed.json" "$(URL)" >"$WORK/$cfg.closed.txt" 2>&1
  log "$cfg: open-loop sweep"
  bin/loadtest sweep -q -rates "$RATES" -c 200 -duration "$STEP" -warmup 1s -body "$PAYLOAD" -metrics "http://127.0.0.1:$PORT/metrics" \
    -o "$WORK/$cfg.open.json" "$(URL)" >"$WORK/$cfg.open.txt" 2>&1
  stop
done

# The report.
row() { cat "$WORK/$1.row"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0 && a > 0) printf "%.2f", a / b; else print "-"}'; }
label() {
  case $1 in
    torch) echo "PyTorch + FastAPI (the article's naive service, $(nproc) uvicorn workers)" ;;
    node) echo "Node.js: sharp + onnxruntime-node, $(nproc) cluster workers, unbatched" ;;
    gateway_off) echo "imagegate, batching off (max_batch_size: 1)" ;;
    gateway_best) echo "imagegate, shipped config (configs/gateway.yaml)" ;;
    gateway_v2) echo "imagegate, shipped config, Open Inference Protocol with binary tensor data (\`loadtest -protocol v2 -binary\`, same server and runs)" ;;
    gateway_grpc) echo "imagegate, shipped config, Open Inference Protocol over gRPC (\`loadtest -protocol grpc\`, same server and runs)" ;;
  esac
}
{
  echo "# Benchmarks"
  echo
  echo "Generated by \`make bench\` (bench/run.sh) on $(date -u +%Y-%m-%d), $(lscpu | sed -n 's/^Model name: *//p'),"
  echo "$(nproc) cores, $(uname -sr). Load generators run on the same cores as the servers. Payload: the article's"
  echo "\`rime_5868.json\` (a 1200x727 JPEG as base64 in JSON, 309,809 bytes). Each server is warmed up with $WARM"
  echo "requests, then measured $RUNS times with each tool; figures are medians; failures are summed over the runs."
  echo "All serve the same model (models/mobilenet_v3_small, 1 intra-op thread per worker or session)."
  echo
  echo "Commands: \`ab -n $N -c 50 -p rime_5868.json -T application/json URL\` and"
  echo "\`bin/loadtest -n $N -c 50 -body rime_5868.json URL\`; for the Open Inference Protocol row,"
  echo "\`bin/loadtest -protocol v2 -binary -model $MODEL -n $N -c 50 -body rime_5868.json http://127.0.0.1:PORT\`"
  echo "(the same image as a v2 request of one BYTES element, binary in and out)."
  if [ "$GRPC" = 1 ]; then
    echo "For the gRPC row, \`bin/loadtest -protocol grpc -model $MODEL -n $N -c 50 -body rime_5868.json 127.0.0.1:GRPC_PORT\`"
    echo "(the same image as the raw BYTES element of a ModelInfer request, 50 calls in flight on one connection)."
  fi
  echo
  LIMIT=$(awk '{print $4}' "$WORK/limit")
  echo "| server | ab req/s | ab p50 ms | ab p99 ms | ab failed | loadtest req/s | loadtest p50 ms | loadtest p99 ms | loadtest errors | peak RSS MiB | ready ms | / limit (ab, loadtest) |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  for s in "${servers[@]}"; do
    read -r a1 a2 a3 a4 l1 l2 l3 l4 rss st < <(row "$s")
    echo "| $(label "$s") | $a1 | $a2 | $a3 | $a4 | $l1 | $l2 | $l3 | $l4 | $rss | $st | $(ratio "$a1" "$LIMIT"), $(ratio "$l1" "$LIMIT") |"
  done
  echo "| in-process ceiling (bench/ceiling: JSON → decode → preprocess → ORT, $(nproc) workers, no HTTP; each run right after one of the shipped config's ab runs) | $CEILING images/s | | | | | | | | | | $(ratio "$CEILING" "$LIMIT") |"
  read -r ld lm lb _ <"$WORK/limit"
  echo "| **the limit**: the decode alone ($ld µs) and the model alone at batch $lb ($lm µs), CPU per image, on $(nproc) cores (below) | $LIMIT images/s | | | | | | | | | | 1 |"
  echo
  best=$(awk '{print $1}' "$WORK/gateway_best.row")
  off=$(awk '{print $1}' "$WORK/gateway_off.row")
  echo "Ratios (ab req/s, same run):"
  echo
  echo "- imagegate shipped config / in-process ceiling: $(ratio "$best" "$CEILING") (medians); round by round (each ab run, then the ceiling): $(ceiling_rounds)"
  echo "- imagegate shipped config / the limit: $(ratio "$best" "$LIMIT") (ab), $(ratio "$(awk '{print $5}' "$WORK/gateway_best.row")" "$LIMIT") (loadtest); the in-process ceiling / the limit: $(ratio "$CEILING" "$LIMIT")"
  if [ "$PEERS" = 1 ]; then
    echo "- imagegate shipped config / PyTorch + FastAPI: $(ratio "$best" "$(awk '{print $1}' "$WORK/torch.row")")"
    echo "- imagegate shipped config / Node.js sharp + onnxruntime-node: $(ratio "$best" "$(awk '{print $1}' "$WORK/node.row")")"
  fi
  if [ -s "$WORK/interleaved" ]; then
    echo "- imagegate shipped config / Node.js, interleaved rounds (below), median of the rounds' ratios: $(median_ratio)"
  fi
  for t in "${TASKS[@]}"; do
    [ -s "$WORK/tasks.$t" ] || continue
    echo "- the $t task (below), medians of the interleaved rounds' ratios: imagegate / in-process ceiling $(tasks_ratio "$t" 3), imagegate / Node.js $(tasks_ratio "$t" 1)"
  done
  echo "- imagegate shipped config / imagegate batching off: $(ratio "$best" "$off")"
  echo "- Open Inference Protocol (binary) / the article's API, loadtest req/s in the same runs: $(ratio "$(awk '{print $5}' "$WORK/gateway_v2.row")" "$(awk '{print $5}' "$WORK/gateway_best.row")")"
  if [ "$GRPC" = 1 ]; then
    echo "- Open Inference Protocol over gRPC / over HTTP (binary), loadtest req/s in the same runs: $(ratio "$(awk '{print $5}' "$WORK/gateway_grpc.row")" "$(awk '{print $5}' "$WORK/gateway_v2.row")");"
    echo "  the server's CPU per request (ms, median of the runs): gRPC $(median <"$WORK/gateway_grpc.cpu"), HTTP binary $(median <"$WORK/gateway_v2.cpu")"
  fi
  echo
  echo "How to read it: on CPU, decoding and resizing are most of a request's cost, so the gateway is"
  echo "measured against the in-process ceiling of its own work; the peers spend more CPU per image"
  echo "(Python and PIL per request; sharp/libvips and per-call overhead in Node.js)."
  echo
  echo "Peak RSS is the sum of VmHWM over the server's processes (uvicorn and node run one process"
  echo "per worker plus a parent). Ready is one start's time from exec to the first 200 of the readiness"
  echo "URL (the gateway's \`/v2/health/ready\`, the peers' \`GET /\`), the gateway's model cache warm; the"
  echo "next section has $STARTS starts of each."
  echo
  echo "## The limit"
  echo
  limit_section
  echo
  echo "## Start-up"
  echo
  echo "Process start to the first 200 of the URL a Kubernetes readiness probe asks, as \`bin/readytime\`"
  echo "measures it (the URL polled every millisecond; the server's CPU time and minor page faults read from"
  echo "/proc at that moment). $STARTS rounds, each starting every server once in turn, so that all see the"
  echo "same state of the machine; an empty model cache is emptied before each of its starts:"
  echo
  startup_table
  echo
  echo "The gateway's start-up loads ONNX Runtime, reads the model and its optimized graph (the model"
  echo "cache: \`runtime.cache_dir\`, docs/startup.md) and runs the model once at its largest batch before"
  echo "it reports ready; with an empty cache it also times the model at batch sizes 1, 2, 4, ... to choose"
  echo "\`max_batch_size: auto\` (about a second at most; docs/defaults.md), and keeps the curve beside the graph."
  echo "Fresh memory is a large part of a start on virtual machines (each page's first touch traps to the"
  echo "hypervisor): hence the page faults."
  echo
  if [ -s "$WORK/interleaved" ]; then
    echo "## Node.js and the shipped config, interleaved"
    echo
    echo "Both servers up at once (idle between their turns), then rounds of \`ab -n $N -c 50\` against"
    echo "the Node.js service and the gateway's shipped config, one after the other, so that each"
    echo "round's two figures see the same state of the machine (req/s):"
    echo
    echo "| round | Node.js | imagegate shipped | ratio |"
    echo "|---|---|---|---|"
    r=0
    while read -r n g; do
      r=$((r + 1))
      echo "| $r | $n | $g | $(ratio "$g" "$n") |"
    done <"$WORK/interleaved"
    echo
  fi
  if [ -s "$WORK/tasks.detect" ] || [ -s "$WORK/tasks.embed" ]; then
    echo "## A detector and an embedding model"
    echo
    tasks_section
    echo
  fi
  echo "## The load generator beside ab and hey"
  echo
  echo "The gateway with its shipped config, $RUNS rounds of \`ab -n $N -c 50 -p rime_5868.json -T application/json\`,"
  echo "\`hey -n $N -c 50 -m POST -D rime_5868.json -T application/json\` and \`bin/loadtest -n $N -c 50 -body rime_5868.json\`,"
  echo "one after another (req/s):"
  echo
  echo "| round | ab | hey | loadtest | loadtest / ab | loadtest / hey |"
  echo "|---|---|---|---|---|---|"
  r=0
  while read -r a h l; do
    r=$((r + 1))
    echo "| $r | $a | $h | $l | $(ratio "$l" "$a") | $(ratio "$l" "$h") |"
  done <"$WORK/tools"
  echo
  echo "Its own CPU use in an open loop at 1,000 req/s for 10 s (\`bin/loadtest -rate 1000 -duration 10s -c 100 http://127.0.0.1:PORT/\`):"
  echo
  echo '```'
  grep -E '^(Sent rate|Throughput|Loadtest CPU)' "$WORK/loadtest_cpu.txt"
  echo '```'
  echo
  echo "## Batching: off, shipped, fixed window, adaptive window"
  echo
  echo "The gateway with the shipped config's runtime settings${SHIPPED_RUNTIME:+ (\`$SHIPPED_RUNTIME\`)} and four batching settings:"
  echo
  echo "- off: \`{max_batch_size: 1}\`"
  echo "- shipped: the shipped config's ${SHIPPED_BATCHING:+\`$SHIPPED_BATCHING\` }(the defaults: adaptive, max_batch_size auto, here $BATCH)"
  echo "- fixed32: \`{max_batch_size: 32, max_queue_delay: 2ms}\`"
  echo "- adaptive: \`{max_batch_size: 32, adaptive: {latency_target: 50ms}}\`"
  echo
  echo "Closed loop at concurrency 1, 8, 50 and open loop at $RATES req/s (constant arrivals, latency"
  echo "from the intended send time), $STEP per step after 1 s of warm-up:"
  echo "\`bin/loadtest sweep -c 1,8,50 -duration $STEP ...\` and \`bin/loadtest sweep -rates $RATES -c 200 ...\`."
  echo "Mean batch size from \`gateway_batch_items_total / gateway_batches_total\` over each step."
  for cfg in mx_off mx_shipped mx_fixed32 mx_adaptive; do
    echo
    echo "### ${cfg#mx_}"
    echo
    echo '```'
    grep -v '^$' "$WORK/$cfg.closed.txt"
    grep -v '^$' "$WORK/$cfg.open.txt"
    echo '```'
  done
  # Hand-written before/after sections (what earlier runs measured) follow the generated ones.
  if [ -f bench/history.md ]; then
    echo
    cat bench/history.md
  fi
} >"$REPORT"
log "wrote $REPORT"
# The README's performance table follows the report (the default report only).
if [ "$REPORT" = docs/benchmarks.md ]; then
  bench/readme.sh -update
  log "updated README.md's performance table"
fi
