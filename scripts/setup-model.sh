#!/usr/bin/env bash
# The pretrained classifier `make run` serves: the ONNX Model Zoo's MobileNetV2 (ImageNet, int8,
# 3.7 MB), fetched and checked against its pinned sha256 by scripts/get-model.sh into
# models/mobilenetv2-12-int8/. scripts/setup.sh runs it.
#
# Usage: scripts/setup-model.sh [--from SOURCE] [--models-dir DIR]
#
#   --from SOURCE      a mirror or a folder holding the model's files (scripts/get-model.sh's
#                      --from; also $IMAGEGATE_MODEL_SOURCE): a failure to fetch from it fails
#   --models-dir DIR   where models are laid out (default: the checkout's models/)
#
# Without a source, the model's public home (huggingface.co) is tried first: when it cannot be
# reached (no network, a firewall), this says so plainly and exits 0, and `make run` serves the
# committed models/mobilenet_v3_small instead, whose random weights make its labels noise (the
# gateway warns at start-up). A model already present is only verified.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
NAME=mobilenetv2-12-int8
HOME_URL=https://huggingface.co/
src=${IMAGEGATE_MODEL_SOURCE:-}
models_dir=$root/models

while [ $# -gt 0 ]; do
  case "$1" in
    --from) [ $# -ge 2 ] || { echo "setup-model: --from needs a source" >&2; exit 2; }; src=$2; shift 2 ;;
    --from=*) src=${1#--from=}; shift ;;
    --models-dir) [ $# -ge 2 ] || { echo "setup-model: --models-dir needs a folder" >&2; exit 2; }; models_dir=$2; shift 2 ;;
    --models-dir=*) models_dir=${1#--models-dir=}; shift ;;
    *) echo "usage: scripts/setup-model.sh [--from SOURCE] [--models-dir DIR]" >&2; exit 2 ;;
  esac
done

get() { IMAGEGATE_MODEL_SOURCE="$src" "$root/scripts/get-model.sh" --models-dir "$models_dir" "$NAME"; }

if [ -f "$models_dir/$NAME/model.onnx" ] || [ -n "$src" ]; then
  get
  exit 0
fi
# Reachable? One quick request (proxies as curl reads them from the environment), so that an
# offline machine is told at once rather than after the download's retries.
if ! curl -fsS -o /dev/null --connect-timeout 5 --max-time 20 -I "$HOME_URL" 2>/dev/null; then
  cat <<MSG
setup: OFFLINE: the pretrained MobileNetV2 ($NAME) cannot be fetched: $HOME_URL is out of reach.
setup: \`make run\` will serve the bundled models/mobilenet_v3_small instead. Its weights are
setup: random: it answers every photo with a confident label that means nothing (the gateway
setup: warns at start-up). For real ImageNet labels, once online (or from a mirror or a folder):
setup:   scripts/get-model.sh [--from SOURCE] $NAME && make run
MSG
  exit 0
fi
get
