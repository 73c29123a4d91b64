# syntax=docker/dockerfile:1
# imagegate's container: a Go + cgo build stage on Debian 12, and a runtime stage that is
# exactly the file set scripts/rootfs.sh assembles (the binary, ONNX Runtime, the C libraries
# ldd finds, the default model, its optimized graph and config, a non-root user): ~64 MB
# uncompressed, no shell, no package manager, no CA certificates. `make rootfs` assembles the same set here and
# deploy/rootfs_test.go serves the default model from it (no Docker engine runs on our machines).
#
#   make image-multiarch            # = docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=$(git describe) ...
#   make image                      # this platform's image without an engine (deploy/cmd/ociimage): docker load -i bin/imagegate-VERSION.tar
#   docker run --rm -p 8080:8080 -p 8001:8001 imagegate:VERSION
#   docker run --rm -p 8080:8080 -v $PWD/models:/models imagegate:VERSION -model /models/x.onnx
#   docker run --rm -p 8080:8080 -v $PWD/my.yaml:/etc/imagegate.yaml imagegate:VERSION -config /etc/imagegate.yaml
#   docker run --rm -p 8080:8080 -v $PWD/mymodel:/mnt/models imagegate:VERSION --model_dir=/mnt/models --model_name=mymodel --http_port=8080
#
# IMAGEGATE_LISTEN and IMAGEGATE_GRPC_LISTEN make the HTTP API (8080) and the gRPC API (8001,
# Open Inference Protocol over h2c) listen on every interface whatever -config or -model it is
# given: environment variables, not flags in CMD, which any argument given to `docker run`
# replaces (precedence: -listen > $IMAGEGATE_LISTEN > server.listen > the default, loopback;
# likewise -grpc-listen > $IMAGEGATE_GRPC_LISTEN > server.grpc_listen).
#
# Each platform's build stage runs natively (under emulation for the other one with buildx):
# the library closure is taken with that platform's ldd, and ONNX Runtime's pinned build for
# that architecture is fetched (scripts/setup-onnxruntime.sh: x64 and arm64).
#
# Layers, slowest-changing first, so a source change reuses all but the last two: the
# toolchain and the C libraries' -dev packages (the ones scripts/setup.sh installs: the rootfs
# test checks), ONNX Runtime (depends only on its setup script), the Go modules (go.mod,
# go.sum), then the source and the build.
FROM golang:1.26-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends libjpeg62-turbo-dev libspng-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY scripts/setup-onnxruntime.sh scripts/
RUN ORT_DIR=/opt/onnxruntime scripts/setup-onnxruntime.sh
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The version the binary reports (/v2, the image label): make image passes git describe.
ARG VERSION
RUN test -n "$VERSION" || { echo 'build with --build-arg VERSION=$(git describe --always --dirty) (make image does)' >&2; exit 1; }
# The default model's optimized graph is made by running the gateway, keyed by this machine's
# CPU: not under emulation (another platform than the build's), whose CPU is no real machine's.
ARG BUILDPLATFORM
ARG TARGETPLATFORM
RUN --mount=type=cache,target=/root/.cache/go-build \
    WARM_CACHE=$([ "$BUILDPLATFORM" = "$TARGETPLATFORM" ] && echo 1 || echo 0) \
    ORT_DIR=/opt/onnxruntime VERSION="$VERSION" scripts/rootfs.sh /rootfs

# The runtime stage: nothing but the assembled file set, i.e. a Debian 12 base trimmed to the
# libraries the gateway links. Not distroless/cc (~23 MB: the same glibc and libstdc++, plus
# OpenSSL, CA certificates and tzdata we never use): this way the stage is assembled and run
# offline by `make rootfs` and its test, with the very libraries the build stage compiled
# against. The price: Debian's security fixes arrive by rebuilding (the golang:1.26-bookworm
# base is refreshed upstream), not by pulling a new base. Keep this stage to the COPY of
# /rootfs and metadata: deploy/rootfs_test.go checks that, and runs the gateway with this
# stage's USER, WORKDIR, ENV, ENTRYPOINT and CMD.
FROM scratch
ARG VERSION
COPY --from=build /rootfs/ /
USER 65532:65532
WORKDIR /app
# runtime.cache_dir auto: /app/cache/imagegate, where scripts/rootfs.sh put the default model's
# optimized graph (read-only at run time: a CPU of another kind than the build's starts without it)
ENV XDG_CACHE_HOME=/app/cache
EXPOSE 8080 8001
LABEL org.opencontainers.image.title="imagegate" \
      org.opencontainers.image.description="Dynamic-batching inference gateway for ONNX image classifiers" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.licenses="see /usr/share/doc/*/copyright"
HEALTHCHECK --interval=10s --timeout=2s CMD ["/app/bin/gateway", "-healthcheck", "http://127.0.0.1:8080/v2/health/ready"]
ENV IMAGEGATE_LISTEN=0.0.0.0:8080 IMAGEGATE_GRPC_LISTEN=0.0.0.0:8001
ENTRYPOINT ["/app/bin/gateway"]
CMD ["-config", "/app/configs/gateway.yaml"]
