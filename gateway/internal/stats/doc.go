// Package stats keeps one model version's cumulative statistics as Triton's statistics
// extension reports them: request counts and summed times (success, fail, queue, compute
// input, infer and output) and per-batch-size execution counts. Updates are atomic adds on
// fixed memory (no lock or allocation); Snapshot copies them into plain values that a front
// end encodes (the HTTP JSON, gRPC's ModelStatistics). It imports nothing of this module.
package stats
