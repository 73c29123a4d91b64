#!/usr/bin/env bash
# Sets up a Debian 12 machine (as root, or with sudo) to build and run the gateway:
#   scripts/setup.sh          build and run dependencies
#   scripts/setup.sh test     also what the test suite needs (headless Chromium for the
#                             load generator's HTML report test)
# It is idempotent: packages already installed are not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(gcc libc6-dev pkg-config libturbojpeg0-dev ca-certificates curl)
command -v npm >/dev/null || pkgs+=(npm)
if [ "${1:-}" = test ]; then
  pkgs+=(chromium)
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
fi

if ! command -v go >/dev/null; then
  [ -x /usr/local/go/bin/go ] && export PATH=$PATH:/usr/local/go/bin
fi
command -v go >/dev/null || { echo "setup: Go 1.26 or newer is needed on PATH (https://go.dev/dl/)" >&2; exit 1; }
go mod download
scripts/setup-onnxruntime.sh
