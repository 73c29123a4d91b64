// Package grpcio is the gRPC server's plumbing below the gateway's pipeline: its codec (a
// ModelInferRequest decoded with raw_input_contents aliasing the message) and its buffer pool
// (buffers not cleared on Get). It imports the protocol's definition (api/inference) and
// grpc-go, nothing of the gateway.
package grpcio
