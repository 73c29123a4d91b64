// Package wire holds the gateway's protocol codecs, the code that turns request bytes into
// values and values into answer bytes, for every front end and transport:
//
//   - a strict one-pass JSON scanner (JSONField, the inference request's header InferRequest,
//     JSONStrings), which skips plain string bytes 8 at a time and, built with
//     GOEXPERIMENT=simd on an AVX2 CPU, 64 at a time;
//   - base64 (DecodeBase64: canonical input through a table decoder, AVX2 32 characters a
//     step, anything else through a lenient path that names the offending byte);
//   - tensor fills from JSON numbers and raw little-endian bytes (FillJSON, FillBinary), and
//     the BYTES element framing of the binary tensor data extension;
//   - JSON output that stays valid whatever a model or client put in it (AppendJSONString...).
//
// Every error about what a client sent wraps ErrMalformed. Nothing here allocates on the
// common path beyond the buffers the caller hands in (tests hold it to AllocsPerRun). It
// imports nothing of this module.
package wire
