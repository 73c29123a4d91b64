// Package grpcapi is the gRPC API's protocol side, the parts that need nothing of the
// pipeline: the server's options (limits, keepalive, flow-control windows, grpcio's codec and
// buffer pool), the mapping of the pipeline's statuses to gRPC codes, the health service over
// a serving predicate, the ModelStreamInfer loop over an infer function, and ModelStatistics
// answers built from the statistics' snapshots (internal/modeldesc describes models). The
// gateway package registers the services and supplies the server's state.
package grpcapi
