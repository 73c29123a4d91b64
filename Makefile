# The README's two commands: `scripts/setup.sh && make run` and `scripts/setup.sh test && make test`.
SHELL := /bin/bash
export PATH := $(CURDIR)/.deps/go/bin:$(PATH):/usr/local/go/bin
GO ?= go
CONFIG ?= configs/gateway.yaml
ORT_LIB := $(CURDIR)/.deps/onnxruntime/libonnxruntime.so
export ONNXRUNTIME_LIB ?= $(ORT_LIB)
# Go 1.26's experimental SIMD package: the resampler's AVX2 kernels (preprocess/resample_simd.go;
# the portable kernels elsewhere and on arm64, and TestSIMDMatchesPortable holds the two to the
# same bits). GOEXPERIMENT= make ... builds without it.
export GOEXPERIMENT ?= simd

.PHONY: setup setup-test build run model test fuzz bench check vet clean reliability rootfs image image-multiarch deploy-test deploy-schemas fleet fleet-short proto proto-check openapi-test console-test

setup:
	scripts/setup.sh $(if $(MODEL_SOURCE),--from $(MODEL_SOURCE))

setup-test:
	scripts/setup.sh test

VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

build:
	$(GO) build -trimpath -ldflags "-X github.com/imagegate/imagegate/gateway.Version=$(VERSION)" -o bin/gateway ./cmd/gateway
	$(GO) build -trimpath -o bin/loadtest ./cmd/loadtest

# make run: the pretrained ImageNet classifier scripts/setup.sh fetches (models/$(PRETRAINED)),
# with no YAML; where it could not be fetched (offline), the committed default model
# (configs/gateway.yaml, whose random weights the gateway warns of at start-up).
# make run CONFIG=FILE: that configuration.
# make run MODEL=NAME: models/NAME/model.onnx with no YAML; a model scripts/get-model.sh knows
# is fetched first when it is not there (make model NAME=... fetches one without serving it).
# RUN_ARGS is expanded when the recipe runs, after setup has fetched what it could.
PRETRAINED := mobilenetv2-12-int8
ifdef MODEL
RUN_ARGS = -model models/$(MODEL)/model.onnx -name $(MODEL)
else ifeq ($(origin CONFIG),file)
RUN_ARGS = $(if $(wildcard models/$(PRETRAINED)/model.onnx),-model models/$(PRETRAINED)/model.onnx -name $(PRETRAINED),-config $(CONFIG))
else
RUN_ARGS = -config $(CONFIG)
endif
run: setup build
ifdef MODEL
	@test -f models/$(MODEL)/model.onnx || scripts/get-model.sh $(MODEL)
endif
	bin/gateway $(RUN_ARGS)

NAME ?= $(MODEL)
model:
	@test -n "$(NAME)" || { echo "make model NAME=...: one of"; scripts/get-model.sh --list; exit 2; }
	scripts/get-model.sh $(NAME)

check: build
	bin/gateway -config $(CONFIG) -check

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...

# The whole suite: vet, race-enabled tests (real ONNX Runtime, real HTTP listener, ../shared
# data), every benchmark once so they keep compiling, and a short run of each fuzz target.
test: setup-test build vet
	GATEWAY_BIN=$(CURDIR)/bin/gateway $(GO) test -race -shuffle=on -count=1 -timeout 20m -skip '^TestReliability' ./...
	# preprocess and postprocess again without the race detector, every case: under it, the long
	# single-goroutine comparisons run one case in eight (preprocess/racesubset_test.go), the
	# end-to-end detection and embedding checks a third of the photos (postprocess/e2e_test.go)
	$(GO) test -shuffle=on -count=1 -timeout 10m ./preprocess/ ./postprocess/
	# the reliability scenarios' short form on their own: their clients keep time (an open loop,
	# probes with deadlines), and beside other packages' race-instrumented tests on 2 CPUs a
	# race-instrumented client fell seconds behind its schedule
	GATEWAY_BIN=$(CURDIR)/bin/gateway $(GO) test -count=1 -timeout 10m -run '^TestReliability' ./cmd/gateway/
	# the integration tests again, against a race-instrumented server that dies on a race
	$(GO) build -race -o bin/gateway-race ./cmd/gateway
	GORACE=halt_on_error=1 GATEWAY_RACE=1 GATEWAY_BIN=$(CURDIR)/bin/gateway-race $(GO) test -count=1 -timeout 10m ./cmd/gateway/
	$(GO) test -run='^$$' -bench=. -benchtime=1x -timeout 10m ./...
	$(MAKE) fuzz FUZZSECONDS=10
	$(MAKE) deploy-test
	$(MAKE) openapi-test
	$(MAKE) console-test
	$(MAKE) fleet-short

FUZZSECONDS ?= 30
# Each target runs a count of inputs, about FUZZSECONDS of fuzzing on this project's 2-core
# machines (its executions per second there below), never a duration: with -fuzztime as a
# duration, Go's coordinator can fail a run that found nothing with "context deadline
# exceeded" (it reads its deadline's context before the child it compares with is cancelled,
# golang/go#75804, fixed in Go 1.27). A count has no deadline to race.
# -fuzzminimizetime bounds each minimization by a count as well. A target missing here fails;
# internal/layout's TestFuzzTargetsRun checks that every fuzz target is listed and has a rate.
FUZZ_RATES := FuzzDecodeStdBase64=69000 FuzzBody=49000 FuzzUnmarshalInfer=10000 \
  FuzzGRPCModelInfer=4000 FuzzProcess=2500 FuzzJPEG=10000 FuzzPNG=9000 FuzzWebP=1300 \
  FuzzPooledMatchesFresh=4300 FuzzProbe=3200 FuzzDecode=35000 FuzzDecodeResponse=9000
fuzz:
	@set -e; for pkg in ./gateway/internal/wire ./gateway/internal/grpcio ./gateway ./preprocess ./postprocess ./loadtest/oipgrpc; do \
	  for f in $$($(GO) test -list='^Fuzz' $$pkg | grep '^Fuzz'); do \
	    rate=$$(printf '%s\n' $(FUZZ_RATES) | sed -n "s/^$$f=//p"); \
	    if [ -z "$$rate" ]; then echo "fuzz: $$f has no rate in the Makefile's FUZZ_RATES"; exit 1; fi; \
	    echo "fuzz $$pkg $$f: $$((rate * $(FUZZSECONDS))) inputs"; \
	    $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$$((rate * $(FUZZSECONDS)))x -fuzzminimizetime=100x $$pkg; \
	  done; \
	done

# The side-by-side benchmark report, docs/benchmarks.md (about 15 minutes; installs the peers'
# Debian and npm packages). N, RUNS, WARM, STEP, RATES, PEERS=0: see bench/run.sh.
bench: setup
	bench/run.sh

# The reliability suite's long form against bin/gateway: slow bodies, PNG bombs, 4x overload,
# SIGTERM under load, slowloris, idle lockout; checks the targets and writes docs/reliability.md
# (about 4 minutes). `make test` runs the same scenarios in a short form.
reliability: setup-test build
	GATEWAY_BIN=$(CURDIR)/bin/gateway $(GO) test -count=1 -timeout 30m -run 'Reliability' -v ./cmd/gateway \
	  -reliability.long -reliability.report=$(CURDIR)/docs/reliability.md

# The container's runtime file set, assembled by the same script the Dockerfile runs, with each
# file's size and the total (the image's uncompressed size): bin/rootfs, bin/rootfs.files.
rootfs:
	VERSION=$(VERSION) scripts/rootfs.sh bin/rootfs

# The image, for this machine's platform, with no container engine: the Dockerfile's runtime
# stage (FROM scratch + the rootfs) written by deploy/cmd/ociimage as an archive that
# `docker load -i`, `podman load -i` and `ctr image import` read (an OCI image layout with
# Docker's manifest.json), then run as `docker run --rm -p 8080:8080 $(IMAGE):$(VERSION)`.
# deploy/rootfs_test.go loads it with podman, unpacks it and runs it with its own configuration.
IMAGE ?= ghcr.io/imagegate/imagegate
image: rootfs
	cd deploy && $(GO) run ./cmd/ociimage -rootfs $(CURDIR)/bin/rootfs -dockerfile $(CURDIR)/Dockerfile \
	  -version $(VERSION) -ref $(IMAGE):$(VERSION) -o $(CURDIR)/bin/imagegate-$(VERSION).tar

# The multi-arch image with a Docker engine and buildx, as the release workflow builds and
# pushes it (.github/workflows/release.yml): IMAGE_PUSH=1 pushes.
PLATFORMS ?= linux/amd64,linux/arm64
image-multiarch:
	docker buildx build --platform $(PLATFORMS) --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION) $(if $(IMAGE_PUSH),--push) .

# The deployment files' checks (deploy/, a Go module of its own): every manifest and kustomize
# rendering decoded strictly into the official types and validated with kubeconform against
# deploy/schemas/, testdata/broken/ failing, the gateway serving from the container's file set,
# and the monitoring rules and dashboard (promtool, and against bin/gateway and a real Prometheus).
deploy-test: build rootfs
	cd deploy && $(GO) vet ./... && ROOTFS=$(CURDIR)/bin/rootfs GATEWAY_BIN=$(CURDIR)/bin/gateway $(GO) test -count=1 -timeout 10m ./...

# The OpenAPI document's checks (openapitest/, a Go module of its own, so that the validator,
# github.com/pb33f/libopenapi-validator, stays out of the server's go.mod): docs/openapi.yaml is
# a valid OpenAPI 3.1 document, and a running bin/gateway's answers to a request of every
# operation it describes match it.
openapi-test: build
	cd openapitest && $(GO) vet ./... && GATEWAY_BIN=$(CURDIR)/bin/gateway $(GO) test -count=1 -timeout 5m ./...

# The console in the browser (docs/console.md), driven in Debian's headless Chromium against
# bin/gateway: a photo classified, the live view following requests, both color schemes, 200 %
# zoom, the keyboard, canned detection and embedding answers, no request to another host. Its
# test is a Go module of its own (gateway/internal/console/browsertest), so that the browser
# driver stays out of the server's go.mod. SCREENSHOT=docs/console.png rewrites the picture
# docs/console.md shows.
SCREENSHOT ?= bin/console.png
console-test: build
	cd gateway/internal/console/browsertest && $(GO) vet ./... && \
	  GATEWAY_BIN=$(CURDIR)/bin/gateway $(GO) test -count=1 -timeout 5m ./... -screenshot=$(abspath $(SCREENSHOT))

# The fleet on one machine (deploy/cmd/fleet): 3 gateways behind HAProxy, an open loop at 70 %
# of the fleet's capacity, two rolling restarts under it (zero failed requests required), and
# HAProxy's overhead; bin/fleet/fleet.md (docs/deploy.md). fleet-short is the ~1 minute form.
fleet: build
	scripts/fleet.sh

fleet-short: build
	scripts/fleet.sh -short

# Regenerates the gRPC protocol's Go code (api/inference/*.pb.go) from its .proto files with
# the pinned generators (scripts/proto.sh: Debian's protoc, installed when missing;
# protoc-gen-go and protoc-gen-go-grpc into .deps/bin). proto-check regenerates into a
# temporary directory and fails if the committed code differs; without protoc, api/inference's
# tests check the committed code against the checksums make proto wrote.
proto:
	scripts/proto.sh

proto-check:
	scripts/proto.sh -check

# Regenerates deploy/schemas/ from the pinned Kubernetes, Prometheus Operator and KServe sources.
deploy-schemas:
	deploy/schemas/generate.sh

clean:
	rm -rf bin
