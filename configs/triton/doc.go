// Package triton reads a Triton Inference Server model configuration, config.pbtxt, with
// Triton's own schema: the protobuf text format parsed by prototext into the Go code generated
// from Triton's model_config.proto (api/inference). It maps what the gateway honours onto the
// keys of a model of the gateway's YAML configuration (a mapping that configs decodes as
// strictly as a YAML file), refuses what would change a model's meaning (another platform,
// sequence batching, ensembles), names every other field that is set and not honoured, and
// completes the configuration as GET /v2/models/{m}/config answers it once the model is
// loaded (Answer), as Triton's auto-complete does.
//
// It imports api/inference and no other package of the repository (configs imports it, so it
// may not import configs: the keys a parameter may set are the caller's, Options.ModelKey).
// Nothing here is safe for concurrent mutation; the values it returns are the caller's.
package triton
