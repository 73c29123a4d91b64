#!/usr/bin/env bash
# make proto: regenerates the Go code of the gRPC protocol definition (api/inference/*.proto)
# reproducibly, with pinned generators:
#   protoc               Debian's protobuf-compiler (installed with apt-get when missing); the
#                        version below, which the generated headers name
#   protoc-gen-go        google.golang.org/protobuf/cmd/protoc-gen-go, the version of
#                        google.golang.org/protobuf in go.mod (generated code and runtime match)
#   protoc-gen-go-grpc   google.golang.org/grpc/cmd/protoc-gen-go-grpc, pinned below
# The plugins are installed with `go install` (the Go module proxy) into $PROTO_BIN
# (.deps/bin by default). It then writes api/inference/generated.sha256, the checksums of the
# .proto files and of what was generated from them: api/inference's tests compare it with the
# files, so that a .proto edited without `make proto`, or generated code edited by hand, fails
# `go test` where protoc is not installed (CI). `scripts/proto.sh -check` regenerates into a
# temporary directory and fails if the committed files differ.
#
# model_config.proto is Triton's own (triton-inference-server/common, protobuf/, licence in
# LICENSE.triton), byte for byte at TRITON_COMMON_COMMIT: configs/triton reads config.pbtxt files
# with its generated code. It has no go_package option; the M flag below gives it ours, so the
# file stays as published (api/inference's tests hold it to TRITON_MODEL_CONFIG_SHA256).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

PROTOC_VERSION=3.21.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
PROTOC_GEN_GO_VERSION=$(go list -m -f '{{.Version}}' google.golang.org/protobuf)
PROTO_BIN=${PROTO_BIN:-$ROOT/.deps/bin}
DIR=api/inference
PROTOS=(grpc_service.proto model_config.proto)
GO_PACKAGE=github.com/imagegate/imagegate/api/inference
# The upstream file vendored as model_config.proto (update both together, then make proto).
TRITON_COMMON_COMMIT=83adf7cf88a2f343005974dff3728be746de2d66
TRITON_MODEL_CONFIG_SHA256=eb72c7ee93dc0eb6aa4393ff186ca0dd0898f0e138b0cd04eb0624a1a592f5f1
if ! echo "$TRITON_MODEL_CONFIG_SHA256  $DIR/model_config.proto" | sha256sum -c --status; then
  echo "proto: $DIR/model_config.proto is not Triton's file at $TRITON_COMMON_COMMIT: fetch" >&2
  echo "proto: https://raw.githubusercontent.com/triton-inference-server/common/$TRITON_COMMON_COMMIT/protobuf/model_config.proto" >&2
  exit 1
fi

check=0
[ "${1:-}" = -check ] && check=1

if ! command -v protoc >/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "proto: installing protoc (Debian's protobuf-compiler)" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends protobuf-compiler >/dev/null
fi
have=$(protoc --version | awk '{print $2}')
if [ "$have" != "$PROTOC_VERSION" ]; then
  echo "proto: protoc $have found, $PROTOC_VERSION wanted (Debian 12's protobuf-compiler): the generated" >&2
  echo "proto: headers name protoc's version, so another one changes every file; install $PROTOC_VERSION" >&2
  echo "proto: or, for a deliberate upgrade, change PROTOC_VERSION in scripts/proto.sh" >&2
  exit 1
fi

# Each plugin is installed once per version, into a directory named after it.
install_plugin() { # NAME PACKAGE VERSION
  local dir="$PROTO_BIN/$1@$3"
  if [ ! -x "$dir/$1" ]; then
    echo "proto: go install $2@$3" >&2
    GOBIN="$dir" GOFLAGS=-mod=mod go install "$2@$3"
  fi
  echo "$dir"
}
gen_go=$(install_plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION")
gen_grpc=$(install_plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION")

out=$DIR
if [ $check = 1 ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
PATH="$gen_go:$gen_grpc:$PATH" protoc -I "$DIR" \
  --go_out="$out" --go_opt=paths=source_relative --go_opt=Mmodel_config.proto=$GO_PACKAGE \
  --go-grpc_out="$out" --go-grpc_opt=paths=source_relative --go-grpc_opt=Mmodel_config.proto=$GO_PACKAGE \
  "${PROTOS[@]}"

sums() { # DIR: the checksums of the .proto files in $DIR/ and of the generated files in $1
  (cd "$DIR" && sha256sum "${PROTOS[@]}")
  (cd "$1" && sha256sum *.pb.go)
}
if [ $check = 1 ]; then
  for f in "$out"/*.pb.go; do
    if ! cmp -s "$f" "$DIR/$(basename "$f")"; then
      echo "proto: $DIR/$(basename "$f") differs from what make proto generates: run make proto" >&2
      exit 1
    fi
  done
  if ! diff -q <(sums "$out") "$DIR/generated.sha256" >/dev/null; then
    echo "proto: $DIR/generated.sha256 is stale: run make proto" >&2
    exit 1
  fi
  echo "proto: $DIR is what make proto generates"
  exit 0
fi
sums "$DIR" >"$DIR/generated.sha256"
echo "proto: generated $(cd "$DIR" && ls *.pb.go | tr '\n' ' ')with protoc $PROTOC_VERSION, protoc-gen-go $PROTOC_GEN_GO_VERSION, protoc-gen-go-grpc $PROTOC_GEN_GO_GRPC_VERSION"
