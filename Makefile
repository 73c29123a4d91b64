# The README's two commands: `scripts/setup.sh && make run` and `scripts/setup.sh test && make test`.
SHELL := /bin/bash
export PATH := $(CURDIR)/.deps/go/bin:$(PATH):/usr/local/go/bin
GO ?= go
CONFIG ?= configs/gateway.yaml
ORT_LIB := $(CURDIR)/.deps/onnxruntime/libonnxruntime.so
export ONNXRUNTIME_LIB ?= $(ORT_LIB)

.PHONY: setup setup-test build run test fuzz bench check vet clean reliability

setup:
	scripts/setup.sh

setup-test:
	scripts/setup.sh test

VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

build:
	$(GO) build -trimpath -ldflags "-X github.com/imagegate/imagegate/gateway.Version=$(VERSION)" -o bin/gateway ./cmd/gateway
	$(GO) build -trimpath -o bin/loadtest ./cmd/loadtest

run: setup build
	bin/gateway -config $(CONFIG)

check: build
	bin/gateway -config $(CONFIG) -check

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...

# The whole suite: vet, race-enabled tests (real ONNX Runtime, real HTTP listener, ../shared
# data), every benchmark once so they keep compiling, and a short run of each fuzz target.
test: setup-test build vet
	GATEWAY_BIN=$(CURDIR)/bin/gateway $(GO) test -race -shuffle=on -count=1 -timeout 20m ./...
	# the integration tests again, against a race-instrumented server that dies on a race
	$(GO) build -race -o bin/gateway-race ./cmd/gateway
	GORACE=halt_on_error=1 GATEWAY_BIN=$(CURDIR)/bin/gateway-race $(GO) test -count=1 -timeout 10m ./cmd/gateway/
	$(GO) test -run='^$$' -bench=. -benchtime=1x -timeout 10m ./...
	$(MAKE) fuzz FUZZTIME=10s

FUZZTIME ?= 30s
fuzz:
	@set -e; for pkg in ./gateway ./preprocess; do \
	  for f in $$($(GO) test -list='^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg; \
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

clean:
	rm -rf bin
