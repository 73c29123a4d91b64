// Package oipgrpc is a client for the Open Inference Protocol over gRPC (package inference,
// service GRPCInferenceService, generated in api/inference) that behaves as Triton's Python
// client, tritonclient.grpc, does with its defaults: tensors travel as raw_input_contents
// (values little-endian, each BYTES element a 4-byte little-endian length and its bytes),
// outputs come back as raw_output_contents (typed contents are read too), a requested
// output's classification is parameters["classification"].int64_param, model_version ""
// lets the server choose, messages may be as large as 2^31-1 bytes both ways, and no
// keepalive pings are sent. It offers health, metadata, model configuration, statistics and
// repository calls, unary inference (Infer; AsyncInfer runs one in the background with a
// callback, as tritonclient's async_infer), the streaming API (OpenStream: requests on one
// ModelStreamInfer stream, answers matched to their request by id), and InferMarshaled, which
// sends an already marshalled request and decodes nothing: the load generator's hot path.
//
// Requests and responses are those of loadtest/oip (oip.Request, oip.Response), so a test
// can send the same request over HTTP and over gRPC and compare the answers; HTTP-only
// settings (binary data flags, base64) do not apply here. It must not import any server
// package of this repository (gateway, batcher, preprocess, runtime, configs): it talks gRPC
// only, like any client; api/inference holds generated code only.
package oipgrpc
