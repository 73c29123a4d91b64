// Package metricset holds the shapes of the gateway's metric families, apart from what they
// measure: each family's # HELP text and the exposition that adds them (VictoriaMetrics
// writes none), the latency and batch size histograms' buckets, and one model version's
// request series (by status code, success, failure reason, duration) with their counting.
// The gateway package registers them on its own metrics.Set and feeds them.
package metricset
