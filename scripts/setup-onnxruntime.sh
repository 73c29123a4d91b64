#!/usr/bin/env bash
# Installs ONNX Runtime's CPU shared library into .deps/onnxruntime/ (or $ORT_DIR).
# The version and the sha256 of every artifact are pinned. It tries Microsoft's official
# release archive first, then the npm package onnxruntime-node, which ships the same official
# Linux x64 CPU build (package/bin/napi-v6/linux/x64/libonnxruntime.so.1).
set -euo pipefail

ORT_VERSION=1.24.3
# sha256 of the library itself (Microsoft's official Linux x64 CPU build), whichever archive
# it comes from, and of the npm archive that carries it.
LIB_SHA256=92ba8e44d31b80a34f5e805076a044122c3be1fffe0d88ed790de7267b0b2682
NPM_TGZ_SHA256=aa1bb5fa261ea68de05dd53efbba210cd7adf2d2850f4c3a201054c74cc78040
GH_TGZ_URL="https://github.com/microsoft/onnxruntime/releases/download/v${ORT_VERSION}/onnxruntime-linux-x64-${ORT_VERSION}.tgz"

root=$(cd "$(dirname "$0")/.." && pwd)
dest=${ORT_DIR:-$root/.deps/onnxruntime}
lib="$dest/libonnxruntime.so"

if [ -f "$lib" ] && [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$ORT_VERSION" ]; then
  echo "onnxruntime $ORT_VERSION already in $dest"
  exit 0
fi
case "$(uname -m)" in
  x86_64) ;;
  *) echo "setup-onnxruntime: only linux x86_64 is pinned here (got $(uname -m))" >&2; exit 1 ;;
esac
mkdir -p "$dest"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

install_lib() { # $1: path of the library file
  install -m 0644 "$1" "$lib.$ORT_VERSION"
  ln -sf "libonnxruntime.so.$ORT_VERSION" "$dest/libonnxruntime.so.1"
  ln -sf "libonnxruntime.so.$ORT_VERSION" "$lib"
  echo "$ORT_VERSION" > "$dest/VERSION"
  echo "onnxruntime $ORT_VERSION installed in $dest"
}

# 1. the official release archive, when reachable; its library must match the pinned sha256
if [ -z "${ORT_SKIP_RELEASE:-}" ] && command -v curl >/dev/null &&
   curl -fsSL --connect-timeout 5 --max-time 300 -o "$work/ort.tgz" "$GH_TGZ_URL" 2>/dev/null &&
   tar -xzf "$work/ort.tgz" -C "$work" 2>/dev/null; then
  so="$work/onnxruntime-linux-x64-${ORT_VERSION}/lib/libonnxruntime.so.${ORT_VERSION}"
  if [ -f "$so" ] && echo "$LIB_SHA256  $so" | sha256sum -c --quiet - 2>/dev/null; then
    install_lib "$so"
    exit 0
  fi
  echo "setup-onnxruntime: the release archive's library does not match the pinned sha256; using npm" >&2
fi

# 2. the npm package onnxruntime-node (same official CPU build)
if ! command -v npm >/dev/null; then
  echo "setup-onnxruntime: npm is needed (apt-get install npm) to fetch onnxruntime-node" >&2
  exit 1
fi
(cd "$work" && npm pack --silent "onnxruntime-node@${ORT_VERSION}" >/dev/null)
tgz="$work/onnxruntime-node-${ORT_VERSION}.tgz"
echo "$NPM_TGZ_SHA256  $tgz" | sha256sum -c --quiet -
tar -xzf "$tgz" -C "$work" package/bin/napi-v6/linux/x64/libonnxruntime.so.1
so="$work/package/bin/napi-v6/linux/x64/libonnxruntime.so.1"
echo "$LIB_SHA256  $so" | sha256sum -c --quiet -
install_lib "$so"
