#!/usr/bin/env bash
# Sets up a Debian 12 machine (as root, or with sudo) to build and run the gateway:
#   scripts/setup.sh [--from SOURCE]   build and run dependencies, and the pretrained ImageNet
#                                      classifier `make run` serves (scripts/setup-model.sh:
#                                      offline, it says so and make run serves the bundled
#                                      model; --from takes the model from a mirror or a folder)
#   scripts/setup.sh test     also what the test suite needs (headless Chromium for the
#                             load generator's HTML report test, HAProxy for the fleet test,
#                             Prometheus's promtool and server for the metrics tests, Python
#                             with PIL, numpy and onnx for the references of the vision tests,
#                             grpcio for the gRPC clients' tests (Triton's schema, TLS),
#                             podman to load the image make image writes, shellcheck for the
#                             workflows' scripts); the tests read their models from ../shared
#                             and fetch none
# It is idempotent: packages already installed are not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=run
model_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    test) mode=test; shift ;;
    --from) [ $# -ge 2 ] || { echo "setup: --from needs a source" >&2; exit 2; }; model_args=(--from "$2"); shift 2 ;;
    --from=*) model_args=(--from "${1#--from=}"); shift ;;
    *) echo "usage: scripts/setup.sh [test] [--from SOURCE]" >&2; exit 2 ;;
  esac
done

pkgs=(gcc libc6-dev pkg-config libjpeg62-turbo-dev libspng-dev ca-certificates curl unzip make git)
command -v npm >/dev/null || pkgs+=(npm)
if [ $mode = test ]; then
  # Debian's Python with PIL, numpy and onnx: the detection and embedding tests compute their
  # references with them on the machine they run on (PIL-exact preprocessing, models cut in a test);
  # python3-grpcio: the gRPC clients of the Triton and TLS tests.
  pkgs+=(chromium haproxy prometheus podman shellcheck python3-pil python3-numpy python3-onnx python3-grpcio)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The tests run promtool and their own Prometheus on loopback; the service the package
  # starts (listening on :9090) is not wanted.
  if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null && systemctl is-active -q prometheus 2>/dev/null; then
    $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
fi

# Go 1.26 or newer: the one on PATH or in /usr/local/go, else the official toolchain from the
# Go module proxy (the same archive `GOTOOLCHAIN=go1.26.8` fetches), unpacked into .deps/go.
GO_VERSION=1.26.8
PATH=$PWD/.deps/go/bin:$PATH:/usr/local/go/bin
go_ok() {
  command -v go >/dev/null || return 1
  local v; v=$(go env GOVERSION 2>/dev/null | sed 's/^go//')
  [ "$(printf '%s\n' 1.26 "$v" | sort -V | head -1)" = 1.26 ]
}
if ! go_ok; then
  case "$(uname -m)" in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; *) echo "setup: no Go toolchain for $(uname -m)" >&2; exit 1 ;; esac
  command -v unzip >/dev/null || { [ "$(id -u)" -eq 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq unzip >/dev/null; }
  proxy=${GOPROXY:-https://proxy.golang.org}; proxy=${proxy%%,*}
  echo "setup: installing Go $GO_VERSION from $proxy into .deps/go"
  tmp=$(mktemp -d)
  curl -fsSL -o "$tmp/go.zip" "$proxy/golang.org/toolchain/@v/v0.0.1-go$GO_VERSION.linux-$arch.zip"
  unzip -q "$tmp/go.zip" -d "$tmp"
  rm -rf .deps/go && mkdir -p .deps && mv "$tmp/golang.org/toolchain@v0.0.1-go$GO_VERSION.linux-$arch" .deps/go
  chmod +x .deps/go/bin/* .deps/go/pkg/tool/*/*
  rm -rf "$tmp"
  go_ok || { echo "setup: the Go toolchain in .deps/go does not run" >&2; exit 1; }
fi
go mod download
scripts/setup-onnxruntime.sh
if [ $mode = run ]; then
  scripts/setup-model.sh "${model_args[@]}"
fi
