package loadtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// batchServer answers /predict and exposes batch counters on /metrics as if
// every two requests formed one batch (mean batch size 2), split over two
// label sets, or as a histogram when asHistogram is set.
func batchServer(t *testing.T, asHistogram bool) string {
	var items atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/predict", func(w http.ResponseWriter, r *http.Request) { items.Add(1) })
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		n := items.Load()
		if asHistogram {
			fmt.Fprintf(w, "# TYPE gateway_batch_size histogram\ngateway_batch_size_bucket{le=\"+Inf\"} %d\ngateway_batch_size_sum %d\ngateway_batch_size_count %d\n", n/2, n, n/2)
			return
		}
		fmt.Fprintf(w, "gateway_batches_total{model=\"a\"} %d\ngateway_batches_total{model=\"b\"} %d\n", n/4, n/2-n/4)
		fmt.Fprintf(w, "gateway_batch_items_total{model=\"a\"} %d\ngateway_batch_items_total{model=\"b\"} %d\n", n/2, n-n/2)
	})
	srv := newServer(t, mux.ServeHTTP)
	return srv.URL
}

func TestSweepConcurrencyWithMetrics(t *testing.T) {
	for _, hist := range []bool{false, true} {
		t.Run(fmt.Sprintf("histogram=%v", hist), func(t *testing.T) {
			base := batchServer(t, hist)
			var steps int
			res, err := Sweep(t.Context(), SweepConfig{
				Base:          Config{URL: base + "/predict", Requests: 40, KeepAlive: true},
				Concurrencies: []int{1, 4},
				MetricsURL:    base + "/metrics",
				OnStep:        func(SweepStep) { steps++ },
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Steps) != 2 || steps != 2 || res.Kind != "concurrency" {
				t.Fatalf("steps: %+v", res.Steps)
			}
			for i, s := range res.Steps {
				if s.Concurrency != []int{1, 4}[i] || s.Summary.OK2xx != 40 || s.MetricsError != "" {
					t.Errorf("step %d: %+v", i, s)
				}
				if s.MeanBatch != 2 || s.Batches != 20 {
					t.Errorf("step %d: mean batch %v over %v batches, want 2 over 20 (%s)", i, s.MeanBatch, s.Batches, s.BatchSource)
				}
			}
		})
	}
}

func TestSweepRatesAndReports(t *testing.T) {
	base := batchServer(t, false)
	res, err := Sweep(t.Context(), SweepConfig{
		Base:       Config{URL: base + "/predict", Duration: 200 * time.Millisecond, Concurrency: 5, KeepAlive: true},
		Rates:      []float64{50, 100},
		MetricsURL: base + "/nope", // 404: reported per step, the sweep goes on
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != "rate" || len(res.Steps) != 2 {
		t.Fatalf("%+v", res)
	}
	for i, s := range res.Steps {
		if s.Rate != []float64{50, 100}[i] || s.Concurrency != 5 || s.Summary.Sent != uint64(s.Rate/5) {
			t.Errorf("step %d: rate %v conc %d sent %d", i, s.Rate, s.Concurrency, s.Summary.Sent)
		}
		if !strings.Contains(s.MetricsError, "404") {
			t.Errorf("step %d: metrics error %q", i, s.MetricsError)
		}
	}
	var text, js bytes.Buffer
	if err := res.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(text.String()), "\n"); len(lines) < 4 || !strings.Contains(lines[1], "p99 ms") {
		t.Errorf("table:\n%s", text.String())
	}
	if err := res.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var m struct {
		Kind  string `json:"kind"`
		Steps []struct {
			Rate    float64 `json:"rate"`
			Results struct {
				Throughput float64               `json:"throughput"`
				Latency    struct{ P99 float64 } `json:"latency_ms"`
			} `json:"results"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(js.Bytes(), &m); err != nil || m.Kind != "rate" || len(m.Steps) != 2 || m.Steps[1].Results.Throughput <= 0 {
		t.Fatalf("sweep JSON: %v %+v", err, m)
	}
	if _, err := Sweep(t.Context(), SweepConfig{Base: Config{URL: base}}); err == nil {
		t.Error("a sweep without steps must fail")
	}
}
