//go:build !cgo

package preprocess

// The decoders are C libraries (libjpeg-turbo, libspng) called through cgo: without cgo
// (CGO_ENABLED=0, or a cross-compilation without a C toolchain) this package cannot be built,
// and the compiler says so with this name.
var _ = preprocess_needs_cgo__build_with_CGO_ENABLED_1_and_a_C_compiler
