package metricset

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// TestRequestsAndHelp: a request is counted by its code (or as other), as a success or by its
// failure reason, and the exposition carries the families' help texts.
func TestRequestsAndHelp(t *testing.T) {
	set := metrics.NewSet()
	r := NewRequests(set, `model="m",version="1"`, []string{"shed"})
	r.Observe(200, "", time.Millisecond)
	r.Observe(503, "shed", time.Millisecond)
	r.Observe(418, "unknown", 0)
	var b bytes.Buffer
	Write(set, &b)
	out := b.String()
	for _, want := range []string{
		`gateway_requests_total{model="m",version="1",code="200"} 1`,
		`gateway_requests_total{model="m",version="1",code="503"} 1`,
		`gateway_requests_total{model="m",version="1",code="other"} 1`,
		`gateway_request_success_total{model="m",version="1"} 1`,
		`gateway_request_failures_total{model="m",version="1",reason="shed"} 1`,
		`gateway_request_duration_seconds_count{model="m",version="1"} 3`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("missing %s in:\n%s", want, out)
		}
	}
	if got := BatchBuckets(12); len(got) != 5 || got[3] != 8 || got[4] != 12 {
		t.Errorf("BatchBuckets(12) = %v", got)
	}
}
