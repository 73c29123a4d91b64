package loadtest

import (
	"errors"
	"math"
	"strings"
	"testing"
)

const promText = `# HELP gateway_batches_total Batches run.
# TYPE gateway_batches_total counter
gateway_batches_total{model="a"} 10
gateway_batches_total{model="b",path="/x,y"} 5 1712345678000
gateway_batch_items_total{model="a"} 70
gateway_batch_items_total{model="b"} 1.5e1

# a histogram, VictoriaMetrics style
gateway_batch_size_bucket{vmrange="1.000e+00...2.000e+00"} 3
gateway_batch_size_sum 42
gateway_batch_size_count 12
weird{msg="a \"quoted\" \\ back\nslash", empty=""} -Inf
up +Inf
nan_metric NaN
spaced { a = "1" , b="2" , } 3
`

func TestParsePrometheus(t *testing.T) {
	ss, err := ParsePrometheus(strings.NewReader(promText))
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 11 {
		t.Fatalf("got %d samples, want 11: %+v", len(ss), ss)
	}
	if ss[1].Name != "gateway_batches_total" || ss[1].Labels["path"] != "/x,y" || ss[1].Value != 5 {
		t.Errorf("sample 1 = %+v", ss[1])
	}
	w := ss[7]
	if w.Labels["msg"] != "a \"quoted\" \\ back\nslash" || w.Labels["empty"] != "" || !math.IsInf(w.Value, -1) {
		t.Errorf("escaped sample = %+v", w)
	}
	if !math.IsInf(ss[8].Value, 1) || !math.IsNaN(ss[9].Value) {
		t.Errorf("special values: %+v %+v", ss[8], ss[9])
	}
	if sp := ss[10]; sp.Labels["a"] != "1" || sp.Labels["b"] != "2" || sp.Value != 3 {
		t.Errorf("spaced sample = %+v", sp)
	}
	if sum, ok := SumMetric(ss, "gateway_batches_total"); !ok || sum != 15 {
		t.Errorf("sum batches = %v %v", sum, ok)
	}
	if _, ok := SumMetric(ss, "missing"); ok {
		t.Error("missing metric found")
	}
}

func TestParsePrometheusErrors(t *testing.T) {
	for _, bad := range []string{
		"no_value\n",
		"m{a=\"x\" 1\n",
		"m{a=x} 1\n",
		"m 1 2 3\n",
		"m abc\n",
		"{a=\"b\"} 1\n",
	} {
		if _, err := ParsePrometheus(strings.NewReader(bad)); !errors.Is(err, ErrPromSyntax) {
			t.Errorf("%q: err = %v, want ErrPromSyntax", bad, err)
		}
	}
}

func TestBatchCounters(t *testing.T) {
	ss, _ := ParsePrometheus(strings.NewReader(promText))
	var m BatchMetrics
	c, err := m.ReadBatchCounters(ss)
	if err != nil || c.Batches != 15 || c.Items != 85 {
		t.Fatalf("counters = %+v, %v", c, err)
	}
	// Without the counter pair, the histogram's _sum/_count are used.
	c, err = BatchMetrics{CountMetric: "nope_total"}.ReadBatchCounters(ss)
	if err != nil || c.Batches != 12 || c.Items != 42 || !strings.Contains(c.Source, "gateway_batch_size") {
		t.Fatalf("histogram counters = %+v, %v", c, err)
	}
	if _, err := (BatchMetrics{CountMetric: "x", Histogram: "y"}).ReadBatchCounters(ss); err == nil {
		t.Fatal("want an error when no batch metric exists")
	}
	if got := MeanBatch(BatchCounters{Batches: 10, Items: 30}, BatchCounters{Batches: 14, Items: 50}); got != 5 {
		t.Errorf("MeanBatch = %v, want 5", got)
	}
	if got := MeanBatch(BatchCounters{Batches: 10}, BatchCounters{Batches: 10}); got != 0 {
		t.Errorf("MeanBatch without batches = %v", got)
	}
}
