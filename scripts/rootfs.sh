#!/usr/bin/env bash
# Assembles the container's runtime file set into a directory: the ONE definition of what the
# image holds. The Dockerfile's build stage runs it and its runtime stage is `FROM scratch` +
# `COPY --from=build /rootfs/ /`; `make rootfs` runs it here, and deploy/rootfs_test.go runs the
# gateway from the result with only its libraries on the loader path.
#
#   scripts/rootfs.sh OUT_DIR
#
# Environment: VERSION (stamped into the binary; default: git describe), GATEWAY_BIN (use this
# binary instead of building one), ORT_DIR (ONNX Runtime, default .deps/onnxruntime),
# WARM_CACHE=0 (no model cache entry: for a build under emulation, whose CPU is no real one).
#
# What goes in:
#   app/bin/gateway                    the binary (cgo, stripped, pure-Go DNS and user lookup)
#   app/configs/gateway.yaml           the default config
#   app/models/mobilenet_v3_small/     the default model and its labels
#   app/cache/imagegate/<key>.ort      the default model's optimized graph (runtime.cache_dir,
#                                      the Dockerfile's XDG_CACHE_HOME), made by the gateway
#   <libdir>/libonnxruntime.so*        ONNX Runtime (dlopened by its bare name, found in libdir)
#   <the loader and every library>     the closure of `ldd` over the binary and ONNX Runtime,
#                                      at the paths the loader found them (glibc, libstdc++,
#                                      libgcc_s, libjpeg-turbo, and whatever is linked later)
#   etc/passwd, etc/group              root and the non-root user gateway (65532)
#   usr/share/doc/*/copyright          the licenses of the libraries shipped
#   tmp/                               empty
# Nothing else: no shell, no package manager, no CA certificates or OpenSSL (the gateway makes
# no outgoing TLS connections).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: scripts/rootfs.sh OUT_DIR}
ort_dir=${ORT_DIR:-$root/.deps/onnxruntime}
version=${VERSION:-$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)}
export PATH=$root/.deps/go/bin:$PATH:/usr/local/go/bin

ort_version=$(cat "$ort_dir/VERSION" 2>/dev/null) || { echo "rootfs: no ONNX Runtime in $ort_dir (run scripts/setup-onnxruntime.sh)" >&2; exit 1; }
ort_lib="$ort_dir/libonnxruntime.so.$ort_version"
[ -f "$ort_lib" ] || { echo "rootfs: $ort_lib is missing" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out/app/bin" "$out/app/configs" "$out/app/models" "$out/etc" "$out/tmp"
chmod 1777 "$out/tmp"

# 1. the binary
if [ -n "${GATEWAY_BIN:-}" ]; then
  install -m 0755 "$GATEWAY_BIN" "$out/app/bin/gateway"
else
  # GOEXPERIMENT=simd: the resampler's AVX2 kernels, as the Makefile builds (amd64; arm64 builds the portable ones)
  (cd "$root" && CGO_ENABLED=1 GOEXPERIMENT="${GOEXPERIMENT-simd}" go build -trimpath -tags netgo,osusergo \
    -ldflags "-s -w -X github.com/imagegate/imagegate/gateway.Version=$version" \
    -o "$out/app/bin/gateway" ./cmd/gateway)
fi

# 2. the default config and model (the config's relative paths hold: app/configs -> app/models)
install -m 0644 "$root/configs/gateway.yaml" "$out/app/configs/gateway.yaml"
mkdir -p "$out/app/models/mobilenet_v3_small"
install -m 0644 "$root/models/mobilenet_v3_small/model.onnx" "$root/models/mobilenet_v3_small/labels.txt" \
  "$out/app/models/mobilenet_v3_small/"

# 3. the C libraries: ldd's closure over the binary and ONNX Runtime (which the binary dlopens,
# so ldd of the binary alone does not show it or what it needs)
declare -A libs=()
closure() { # $1: an ELF file; adds "path" of every library and the loader to libs
  local line path
  while read -r line; do # read strips ldd's leading tab
    case "$line" in
      *"=> not found"*) echo "rootfs: $1 needs a library that is not installed: $line" >&2; exit 1 ;;
      *linux-vdso* | *linux-gate*) continue ;;
      *" => /"*) path=${line#*=> }; path=${path%% (*} ;;
      /*) path=${line%% (*} ;;
      *) continue ;;
    esac
    libs[$path]=1
  done < <(ldd "$1")
}
closure "$out/app/bin/gateway"
closure "$ort_lib"
libc=""
for p in "${!libs[@]}"; do
  case "$(basename "$p")" in libc.so.*) libc=$p ;; esac
  mkdir -p "$out$(dirname "$p")"
  cp -L --preserve=mode "$p" "$out$p"
done
[ -n "$libc" ] || { echo "rootfs: ldd found no libc: is the binary dynamically linked?" >&2; exit 1; }
libdir=$(dirname "$libc") # /lib/x86_64-linux-gnu or /lib/aarch64-linux-gnu: the loader's system path
install -m 0644 "$ort_lib" "$out$libdir/libonnxruntime.so.$ort_version"
ln -sf "libonnxruntime.so.$ort_version" "$out$libdir/libonnxruntime.so.1"
ln -sf "libonnxruntime.so.$ort_version" "$out$libdir/libonnxruntime.so"

# 3b. the default model's cache entry, made by the gateway itself (-check loads the model as a
# start does), so that a container starts on it instead of optimizing the model; beside it,
# the model's batch curve (max_batch_size: auto), so that it does not measure it either. The entry is
# keyed by the CPU's features among others: a container on this machine's kind of CPU loads it;
# on another kind it misses, warns once that the read-only folder cannot take a new entry, and
# starts as without a cache.
if [ "${WARM_CACHE:-1}" = 1 ]; then
  mkdir -p "$out/app/cache"
  if ! check=$(XDG_CACHE_HOME="$(cd "$out/app/cache" && pwd)" ONNXRUNTIME_LIB="$out$libdir/libonnxruntime.so.$ort_version" \
      "$out/app/bin/gateway" -config "$out/app/configs/gateway.yaml" -check -admin-listen off 2>&1) ||
      ! ls "$out"/app/cache/imagegate/*.ort >/dev/null 2>&1; then
    echo "rootfs: the gateway did not write the default model's cache entry (WARM_CACHE=0 skips it):" >&2
    echo "$check" >&2
    exit 1
  fi
fi

# 4. users: numeric 65532 (runAsNonRoot can check it), names for tools that print them
printf 'root:x:0:0:root:/root:/sbin/nologin\ngateway:x:65532:65532:imagegate:/nonexistent:/sbin/nologin\n' > "$out/etc/passwd"
printf 'root:x:0:\ngateway:x:65532:\n' > "$out/etc/group"

# 5. licenses of what is shipped: Debian's copyright file of each library's package, and ONNX
# Runtime's (MIT; the npm package carries no license file of its own)
if command -v dpkg-query >/dev/null; then
  for p in "${!libs[@]}"; do
    pkg=$(dpkg-query -S "$p" 2>/dev/null || dpkg-query -S "/usr$p" 2>/dev/null || dpkg-query -S "$(readlink -f "$p")" 2>/dev/null || true)
    pkg=${pkg%%:*}
    if [ -n "$pkg" ] && [ -f "/usr/share/doc/$pkg/copyright" ]; then
      mkdir -p "$out/usr/share/doc/$pkg"
      install -m 0644 "/usr/share/doc/$pkg/copyright" "$out/usr/share/doc/$pkg/copyright"
    fi
  done
fi
mkdir -p "$out/usr/share/doc/onnxruntime"
cat > "$out/usr/share/doc/onnxruntime/copyright" <<EOF
ONNX Runtime $ort_version, Microsoft's official CPU build (from its release archive or the npm
package onnxruntime-node $ort_version; sha256 pinned in scripts/setup-onnxruntime.sh).
License: MIT. Copyright (c) Microsoft Corporation. Source: https://github.com/microsoft/onnxruntime

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
associated documentation files (the "Software"), to deal in the Software without restriction,
including without limitation the rights to use, copy, modify, merge, publish, distribute,
sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT
NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT
OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
EOF

# Files are root-owned and world-readable; the user runs nothing it could rewrite.
chmod -R u=rwX,go=rX "$out"
chmod 1777 "$out/tmp"

# 6. the listing: every file with its size, and the total (the image's uncompressed size,
# give or take the directory entries)
(cd "$out" && find . -type f -printf '%s\t%P\n' | sort -k2) > "$out.files"
awk -F'\t' -v out="$out" -v version="$version" '{printf "%10d  %s\n", $1, $2; s += $1}
  END {printf "%10d  total (%.1f MB, %.1f MiB) in %s, version %s\n", s, s / 1e6, s / 1048576, out, version}' "$out.files"
