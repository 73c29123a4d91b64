package loadtest

import (
	"fmt"
	"io"
	"strings"
)

// WriteText writes a human-readable summary of r.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	c, s := &r.Config, &r.Summary
	fmt.Fprintf(&b, "Target:        %s %s\n", c.Method, c.URL)
	if len(c.Bodies) > 0 {
		names := make([]string, len(c.Bodies))
		for i, bi := range c.Bodies {
			names[i] = fmt.Sprintf("%s (%d B)", bi.Name, bi.Bytes)
		}
		fmt.Fprintf(&b, "Bodies:        %s\n", strings.Join(names, ", "))
	}
	ka := "keep-alive"
	if !c.KeepAlive {
		ka = "new connection per request"
	}
	if c.Mode == "open" {
		fmt.Fprintf(&b, "Mode:          open loop, %g req/s %s arrivals, at most %d in flight, %s, timeout %gs\n",
			c.Rate, c.Arrival, c.Concurrency, ka, c.TimeoutS)
	} else {
		fmt.Fprintf(&b, "Mode:          closed loop, %d workers, %s, timeout %gs\n", c.Concurrency, ka, c.TimeoutS)
	}
	ok := c.successName()
	fmt.Fprintf(&b, "Requests:      %d sent, %d completed, %d %s", s.Sent, s.Completed, s.OK2xx, ok)
	if s.Warmup > 0 {
		fmt.Fprintf(&b, " (warm-up of %d excluded)", s.Warmup)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "Duration:      %.3f s\n", s.DurationS)
	if s.TargetRate > 0 {
		fmt.Fprintf(&b, "Sent rate:     %.1f req/s (target %g)\n", s.SentRate, s.TargetRate)
		if s.Unsent > 0 {
			fmt.Fprintf(&b, "Unsent:        %d (every worker was busy until the end of -duration: raise -c, or the server is slower than the rate)\n", s.Unsent)
		}
	} else {
		fmt.Fprintf(&b, "Sent rate:     %.1f req/s\n", s.SentRate)
	}
	fmt.Fprintf(&b, "Throughput:    %.1f req/s %s (%.1f req/s completed)\n", s.Throughput, ok, s.CompletedRate)
	from := "send time"
	if c.Mode == "open" {
		from = "intended send time"
	}
	fmt.Fprintf(&b, "Latency (ms, from %s):\n", from)
	writeStats(&b, s.Latency)
	if c.Mode == "open" {
		b.WriteString("Service time (ms, from actual send time):\n")
		writeStats(&b, s.ServiceTime)
		b.WriteString("Send delay (ms, intended to actual send; pacer lag plus waits for a free worker):\n")
		writeStats(&b, s.SendDelay)
	}
	if s.Refused > 0 {
		fmt.Fprintf(&b, "Latency of %s answers (ms):\n", ok)
		writeStats(&b, s.SuccessLatency)
		fmt.Fprintf(&b, "Latency of refusals, %s (ms, %d refused):\n", c.refusalNames(), s.Refused-s.Expired)
		writeStats(&b, s.RefusalLatency)
		if s.Expired > 0 {
			fmt.Fprintf(&b, "Latency of refusals after a wait in the server's line (ms, %d marked %s: %s):\n", s.Expired, RefusalHeader, RefusalExpired)
			writeStats(&b, s.ExpiredLatency)
		}
	}
	if len(s.StatusCodes) > 0 {
		if c.Protocol == string(ProtocolGRPC) {
			b.WriteString("gRPC codes:   ")
		} else {
			b.WriteString("Status codes: ")
		}
		for _, k := range sortedKeys(s.StatusCodes) {
			fmt.Fprintf(&b, " %s=%d", k, s.StatusCodes[k])
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "Errors:        %d", s.Errors)
	for _, k := range sortedKeys(s.ErrorKinds) {
		fmt.Fprintf(&b, " %s=%d", k, s.ErrorKinds[k])
	}
	b.WriteString("\n")
	for _, k := range sortedKeys(s.ErrorSamples) {
		fmt.Fprintf(&b, "  first %s: %s\n", k, s.ErrorSamples[k])
	}
	fmt.Fprintf(&b, "Transfer:      %s in, %s out\n", humanBytes(s.BytesIn), humanBytes(s.BytesOut))
	fmt.Fprintf(&b, "Loadtest CPU:  user %.2f s + sys %.2f s over %.2f s = %.1f %% of one core\n",
		s.CPU.UserS, s.CPU.SysS, s.CPU.WallS, s.CPU.Percent)
	_, err := io.WriteString(w, b.String())
	return err
}

// successName names the successful answers of the run's protocol: 2xx, or gRPC's OK.
func (c *ReportConfig) successName() string {
	if c.Protocol == string(ProtocolGRPC) {
		return "OK"
	}
	return "2xx"
}

// refusalNames names the answers counted as refusals.
func (c *ReportConfig) refusalNames() string {
	if c.Protocol == string(ProtocolGRPC) {
		return "RESOURCE_EXHAUSTED/UNAVAILABLE"
	}
	return "429/503"
}

func writeStats(b *strings.Builder, l LatencyStats) {
	fmt.Fprintf(b, "  min %s  mean %s  p50 %s  p90 %s  p99 %s  p99.9 %s  max %s\n",
		fmtMs(l.Min), fmtMs(l.Mean), fmtMs(l.P50), fmtMs(l.P90), fmtMs(l.P99), fmtMs(l.P999), fmtMs(l.Max))
}

// fmtMs prints milliseconds with three significant digits or more.
func fmtMs(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
