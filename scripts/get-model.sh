#!/usr/bin/env bash
# Downloads a pretrained ImageNet classifier from its public home, checks it against a pinned
# sha256, and lays it out for `make run MODEL=NAME` (bin/gateway -model models/NAME/model.onnx):
#
#   models/NAME/model.onnx      the ONNX Model Zoo's file, byte for byte
#   models/NAME/labels.json     ImageNet's 1000 class names, index = class id
#
# Usage: scripts/get-model.sh [--from SOURCE] [--models-dir DIR] NAME
#        scripts/get-model.sh --list
#
#   --from SOURCE      take the files from SOURCE instead of their public home: a folder or a
#                      URL (file://, https://) holding NAME.onnx and imagenet-simple-labels.json
#                      (a mirror, or ../shared/models/mobilenetv2-12-int8 offline);
#                      also $IMAGEGATE_MODEL_SOURCE
#   --models-dir DIR   lay the model out under DIR/NAME (default: the checkout's models/)
#
# Every file must match its pinned sha256 wherever it comes from; a file that does not is
# removed and the script fails. A model already present and matching is not downloaded again.
# The pins are the zoo's own (its Git LFS pointers and ONNX_HUB_MANIFEST.json in onnx/models),
# which the zoo's Hugging Face copies match.
set -euo pipefail

# name | bytes | sha256 | what it is (the bytes are informative; the sha256 decides)
MODELS="
mobilenetv2-12|13964571|c0c3f76d93fa3fd6580652a45618618a220fced18babf65774ed169de0432ad5|MobileNetV2 1.0, float32, 14.0 MB
mobilenetv2-12-int8|3655033|cc028fe6cae7bc11a4ff53cfc9b79c920e8be65ce33a904ec3e2a8f66d77f95f|MobileNetV2 1.0, int8-quantized, 3.7 MB
resnet50-v1-12|102576593|3f03fdef724b22947eed826f1eef1dc5c34151bb4c37d634f1db89dfa2dd1526|ResNet-50 v1, float32, 102.6 MB
resnet50-v1-12-int8|25816052|c234f30975989788b4405f25253275aae247ab6dbdd34aaa69ab0a59ff76f6d0|ResNet-50 v1, int8-quantized, 25.8 MB
"
# The zoo's files on Hugging Face (the zoo's Git LFS downloads ended in July 2025).
model_url() { echo "https://huggingface.co/onnxmodelzoo/$1/resolve/main/$1.onnx"; }

# anishathalye/imagenet-simple-labels (public domain), at a fixed commit: the zoo's class order.
LABELS_FILE=imagenet-simple-labels.json
LABELS_SHA256=987705581d9446328498f950454a1cc7d8dfc578a8243d8bfdcd2588a6905aae
LABELS_URL=https://raw.githubusercontent.com/anishathalye/imagenet-simple-labels/d752588080eb93bca0ca75257c54423835bcd28f/imagenet-simple-labels.json

root=$(cd "$(dirname "$0")/.." && pwd)
models_dir=$root/models
src=${IMAGEGATE_MODEL_SOURCE:-}
name=""

usage() {
  echo "usage: scripts/get-model.sh [--from SOURCE] [--models-dir DIR] NAME    (--list: the names)" >&2
  exit 2
}
list() {
  echo "$MODELS" | while IFS='|' read -r n _ _ what; do
    if [ -n "$n" ]; then printf '  %-20s %s\n' "$n" "$what"; fi
  done
}

while [ $# -gt 0 ]; do
  case "$1" in
    --from) [ $# -ge 2 ] || usage; src=$2; shift 2 ;;
    --from=*) src=${1#--from=}; shift ;;
    --models-dir) [ $# -ge 2 ] || usage; models_dir=$2; shift 2 ;;
    --models-dir=*) models_dir=${1#--models-dir=}; shift ;;
    -l | --list) echo "models scripts/get-model.sh knows:"; list; exit 0 ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    -*) echo "get-model: unknown option $1" >&2; usage ;;
    *) [ -z "$name" ] || usage; name=$1; shift ;;
  esac
done
[ -n "$name" ] || usage

entry=""
[[ "$name" =~ ^[a-z0-9.-]+$ ]] && entry=$(echo "$MODELS" | grep "^$name|" || true)
if [ -z "$entry" ]; then
  echo "get-model: unknown model \"$name\"; the known ones:" >&2
  list >&2
  exit 2
fi
IFS='|' read -r _ _ model_sha256 what <<<"$entry"

if command -v sha256sum >/dev/null; then
  sha256() { sha256sum "$1" | cut -d' ' -f1; }
elif command -v shasum >/dev/null; then
  sha256() { shasum -a 256 "$1" | cut -d' ' -f1; }
else
  echo "get-model: sha256sum or shasum is needed to check the files" >&2
  exit 1
fi

# fetch URL DEST: a URL (curl or wget, with retries) or a local path; file:// URLs are local.
fetch() {
  local url=$1 dest=$2
  case "$url" in
    file://*) cat -- "${url#file://}" >"$dest" ;;
    *://*)
      if command -v curl >/dev/null; then
        curl -fL --retry 3 --retry-connrefused --retry-delay 2 --connect-timeout 20 \
          --progress-bar -o "$dest" "$url"
      elif command -v wget >/dev/null; then
        wget -q --show-progress --tries=3 --waitretry=2 --timeout=60 -O "$dest" "$url"
      else
        echo "get-model: curl or wget is needed to download $url" >&2
        return 1
      fi
      ;;
    *) cat -- "$url" >"$dest" ;;
  esac
}

dest=$models_dir/$name
mkdir -p "$models_dir"
# Downloads land in a temporary folder beside the destination and are moved into place only
# once verified, so an interrupted or failed run leaves nothing behind.
work=$(mktemp -d "$models_dir/.get-model.XXXXXX")
trap 'rm -rf "$work"' EXIT

# need FILE SHA256 URL: FILE in the destination is verified in place, or fetched into the work
# folder and verified there (a file that does not match is removed; the run then fails).
need() {
  local file=$1 want=$2 url=$3 got
  if [ -f "$dest/$file" ]; then
    if [ "$(sha256 "$dest/$file")" = "$want" ]; then
      echo "get-model: $dest/$file is present and verified"
      return 0
    fi
    echo "get-model: $dest/$file does not match its pinned sha256: fetching it again"
  fi
  echo "get-model: fetching $url"
  if ! fetch "$url" "$work/$file"; then
    rm -f "$work/$file"
    if [ -z "$src" ]; then
      echo "get-model: cannot fetch $url (offline? --from or IMAGEGATE_MODEL_SOURCE take a mirror or a local folder)" >&2
    else
      echo "get-model: cannot fetch $url (from --from or IMAGEGATE_MODEL_SOURCE)" >&2
    fi
    return 1
  fi
  got=$(sha256 "$work/$file")
  if [ "$got" != "$want" ]; then
    rm -f "$work/$file"
    echo "get-model: checksum mismatch for $url: sha256 $got, pinned $want; the file was removed" >&2
    return 1
  fi
}

if [ -n "$src" ]; then
  case "$src" in
    *://*) ;;
    *) [ -d "$src" ] || { echo "get-model: --from $src: no such folder" >&2; exit 1; }
       src=$(cd "$src" && pwd) ;;
  esac
  src=${src%/}
  model_src=$src/$name.onnx
  labels_src=$src/$LABELS_FILE
else
  model_src=$(model_url "$name")
  labels_src=$LABELS_URL
fi

echo "get-model: $name: $what"
need model.onnx "$model_sha256" "$model_src"
need labels.json "$LABELS_SHA256" "$labels_src"
# Both verified: only now does anything land in the destination.
if [ -n "$(ls -A "$work")" ]; then
  mkdir -p "$dest"
  mv -f "$work"/* "$dest/"
fi
echo "get-model: $dest/model.onnx and labels.json verified (sha256 $model_sha256)"
echo "get-model: serve it with: make run MODEL=$name"
