// Package ort wraps ONNX Runtime (through github.com/yalue/onnxruntime_go) for the gateway:
// loading the shared library once, inspecting a model's inputs and outputs, and running
// sessions whose input and output tensors are allocated once, at the largest batch size, and
// reused: a batch of n runs on a view of the first n rows. It keeps two caches between starts,
// in runtime.cache_dir: a model's optimized graph (cache.go) and its batch curve, the run time
// per image measured at batch sizes 1, 2, 4, ... on this machine (batchcurve.go), from which the
// gateway chooses max_batch_size: auto.
//
// It knows nothing about HTTP, images or batching policy, and imports no other package of the
// repository. A Session is not safe for concurrent use: the gateway gives each batch loop
// (instance) its own.
package ort
