# Multi-stage build: a Go build stage (cgo, libjpeg-turbo headers, the pinned ONNX Runtime
# library) and a slim Debian runtime stage that runs as a non-root user.
#   docker build -t imagegate .
#   docker run --rm -p 8080:8080 imagegate
FROM golang:1.26-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends libturbojpeg0-dev npm ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN scripts/setup-onnxruntime.sh && CGO_ENABLED=1 go build -trimpath -ldflags="-s -w" -o /out/gateway ./cmd/gateway

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends libturbojpeg0 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home gateway
COPY --from=build /src/.deps/onnxruntime/libonnxruntime.so.1.24.3 /usr/local/lib/libonnxruntime.so
COPY --from=build /out/gateway /app/bin/gateway
COPY models/mobilenet_v3_small /app/models/mobilenet_v3_small
COPY configs/gateway.yaml /app/configs/gateway.yaml
ENV ONNXRUNTIME_LIB=/usr/local/lib/libonnxruntime.so
USER 10001
WORKDIR /app
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=2s CMD ["/app/bin/gateway", "-healthcheck", "http://127.0.0.1:8080/v2/health/ready"]
ENTRYPOINT ["/app/bin/gateway", "-config", "/app/configs/gateway.yaml", "-listen", "0.0.0.0:8080"]
