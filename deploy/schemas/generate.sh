#!/usr/bin/env bash
# Regenerates deploy/schemas/ from the pinned upstream sources (README.md beside this file):
# the Go module proxy serves each repository as a module zip, so no other download is needed.
#   deploy/schemas/generate.sh        (make deploy-schemas)
set -euo pipefail
cd "$(dirname "$0")/.."
K8S=k8s.io/kubernetes@v1.37.2
KSERVE=github.com/kserve/kserve@v0.17.0
PROMOP=github.com/prometheus-operator/prometheus-operator@v0.85.0

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dir() { # module@version -> its folder in the module cache
  (cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$1") | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'
}
k8s=$(dir $K8S)
kserve=$(dir $KSERVE)
promop=$(dir $PROMOP)
find schemas -name '*.json' -delete
go run ./cmd/schemagen -out schemas \
  -swagger "$k8s/api/openapi-spec/swagger.json" \
  -crd "$promop/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" \
  -crd "$promop/example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml" \
  -crd "$promop/example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml" \
  -crd "$kserve/config/crd/full/serving.kserve.io_servingruntimes.yaml" \
  -crd "$kserve/config/crd/full/serving.kserve.io_clusterservingruntimes.yaml" \
  -crd "$kserve/config/crd/full/serving.kserve.io_inferenceservices.yaml"
