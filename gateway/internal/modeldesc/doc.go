// Package modeldesc describes a model version to clients, from a plain description of it
// (Model): its metadata and its configuration (Triton's model configuration extension), as
// the Open Inference Protocol answers them over HTTP (JSON) and over gRPC (protobuf), so that
// both transports describe a model alike.
package modeldesc
