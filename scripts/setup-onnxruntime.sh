#!/usr/bin/env bash
# Installs ONNX Runtime's CPU shared library into .deps/onnxruntime/ (or $ORT_DIR), for Linux
# x86_64 or aarch64 (the machine's, or $ORT_ARCH: x64 or arm64).
# The version and the sha256 of every artifact are pinned. It tries Microsoft's official
# release archive first, then the npm package onnxruntime-node, which ships the same official
# Linux CPU builds (package/bin/napi-v6/linux/{x64,arm64}/libonnxruntime.so.1): with npm when
# it is installed, else its registry tarball with curl (a container build needs no Node.js).
set -euo pipefail

ORT_VERSION=1.24.3
# sha256 of the npm archive, and of the library inside it for each architecture. The x64
# library is byte-identical in Microsoft's release archive; the arm64 one was pinned from the
# npm package (a release archive whose library differs is refused, and npm is used).
NPM_TGZ_SHA256=aa1bb5fa261ea68de05dd53efbba210cd7adf2d2850f4c3a201054c74cc78040
NPM_TGZ_URL="https://registry.npmjs.org/onnxruntime-node/-/onnxruntime-node-${ORT_VERSION}.tgz"
case "${ORT_ARCH:-$(uname -m)}" in
  x86_64 | amd64 | x64)
    arch=x64 rel=x64
    LIB_SHA256=92ba8e44d31b80a34f5e805076a044122c3be1fffe0d88ed790de7267b0b2682 ;;
  aarch64 | arm64)
    arch=arm64 rel=aarch64
    LIB_SHA256=33032cb5b91c12edbf028d7c69fa40a31848d66c0095448758af237d5e0b07db ;;
  *) echo "setup-onnxruntime: only linux x86_64 and aarch64 are pinned here (got ${ORT_ARCH:-$(uname -m)})" >&2; exit 1 ;;
esac
GH_TGZ_URL="https://github.com/microsoft/onnxruntime/releases/download/v${ORT_VERSION}/onnxruntime-linux-${rel}-${ORT_VERSION}.tgz"

root=$(cd "$(dirname "$0")/.." && pwd)
dest=${ORT_DIR:-$root/.deps/onnxruntime}
lib="$dest/libonnxruntime.so"

if [ -f "$lib" ] && [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$ORT_VERSION" ] &&
   echo "$LIB_SHA256  $lib" | sha256sum -c --quiet - 2>/dev/null; then
  echo "onnxruntime $ORT_VERSION ($arch) already in $dest"
  exit 0
fi
mkdir -p "$dest"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

install_lib() { # $1: path of the library file
  install -m 0644 "$1" "$lib.$ORT_VERSION"
  ln -sf "libonnxruntime.so.$ORT_VERSION" "$dest/libonnxruntime.so.1"
  ln -sf "libonnxruntime.so.$ORT_VERSION" "$lib"
  echo "$ORT_VERSION" > "$dest/VERSION"
  echo "onnxruntime $ORT_VERSION ($arch) installed in $dest"
}

# 1. the official release archive, when reachable; its library must match the pinned sha256
if [ -z "${ORT_SKIP_RELEASE:-}" ] && command -v curl >/dev/null &&
   curl -fsSL --connect-timeout 5 --max-time 300 -o "$work/ort.tgz" "$GH_TGZ_URL" 2>/dev/null &&
   tar -xzf "$work/ort.tgz" -C "$work" 2>/dev/null; then
  so="$work/onnxruntime-linux-${rel}-${ORT_VERSION}/lib/libonnxruntime.so.${ORT_VERSION}"
  if [ -f "$so" ] && echo "$LIB_SHA256  $so" | sha256sum -c --quiet - 2>/dev/null; then
    install_lib "$so"
    exit 0
  fi
  echo "setup-onnxruntime: the release archive's library does not match the pinned sha256; using npm" >&2
fi

# 2. the npm package onnxruntime-node (same official CPU builds)
tgz="$work/onnxruntime-node-${ORT_VERSION}.tgz"
if command -v npm >/dev/null; then
  (cd "$work" && npm pack --silent "onnxruntime-node@${ORT_VERSION}" >/dev/null)
elif command -v curl >/dev/null; then
  curl -fsSL --retry 3 -o "$tgz" "$NPM_TGZ_URL"
else
  echo "setup-onnxruntime: npm or curl is needed to fetch onnxruntime-node" >&2
  exit 1
fi
echo "$NPM_TGZ_SHA256  $tgz" | sha256sum -c --quiet -
tar -xzf "$tgz" -C "$work" "package/bin/napi-v6/linux/$arch/libonnxruntime.so.1"
so="$work/package/bin/napi-v6/linux/$arch/libonnxruntime.so.1"
echo "$LIB_SHA256  $so" | sha256sum -c --quiet -
install_lib "$so"
