package grpcapi

import (
	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/gateway/internal/stats"
)

// Statistics is one model version's ModelStatistics from its counters' snapshot.
func Statistics(name, version string, s stats.Snapshot) *inference.ModelStatistics {
	d := func(v stats.Duration) *inference.StatisticDuration {
		return &inference.StatisticDuration{Count: v.Count, Ns: v.Ns}
	}
	is := s.InferenceStats
	out := &inference.ModelStatistics{Name: name, Version: version, LastInference: s.LastInference,
		InferenceCount: s.InferenceCount, ExecutionCount: s.ExecutionCount,
		InferenceStats: &inference.InferStatistics{Success: d(is.Success), Fail: d(is.Fail), Queue: d(is.Queue),
			ComputeInput: d(is.ComputeInput), ComputeInfer: d(is.ComputeInfer), ComputeOutput: d(is.ComputeOutput),
			CacheHit: &inference.StatisticDuration{}, CacheMiss: &inference.StatisticDuration{}}}
	for _, b := range s.BatchStats {
		out.BatchStats = append(out.BatchStats, &inference.InferBatchStatistics{BatchSize: b.BatchSize,
			ComputeInput: d(b.ComputeInput), ComputeInfer: d(b.ComputeInfer), ComputeOutput: d(b.ComputeOutput)})
	}
	return out
}
