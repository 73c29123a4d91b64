// Package inference is the Open Inference Protocol's gRPC definition (package inference,
// service GRPCInferenceService: KServe's grpc_predict_v2 with Triton's extensions, see
// grpc_service.proto; model_config.proto is Triton's own file, vendored as published with its
// licence, LICENSE.triton) and the Go code protoc generates from it:
// messages (*.pb.go, protoc-gen-go) and the client and server stubs (*_grpc.pb.go,
// protoc-gen-go-grpc). `make proto` regenerates the code with the pinned generators named in
// each file's header (scripts/proto.sh); nothing here is written by hand but
// grpc_service.proto, this file and the tests. It holds no logic and imports only the protobuf and gRPC
// runtimes: the gateway's gRPC server implements GRPCInferenceServiceServer, and the load
// generator's client (loadtest/oipgrpc) uses GRPCInferenceServiceClient. Messages follow
// protobuf-go's rules: not safe for concurrent mutation, safe for concurrent reads.
package inference
