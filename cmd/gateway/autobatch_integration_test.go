package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/imagegate/imagegate/runtime/ort"
)

// max_batch_size: auto (the default): the first start measures the curve and writes it to
// runtime.cache_dir, chooses by the rule (recomputed here from the entry), and says so in its
// log, its model's configuration, -check and -print-config, and its metrics; a second start
// reads the entry; a number set in the YAML is used as it is, unmeasured.
func TestAutoBatchSize(t *testing.T) {
	ortLib(t)
	cache := t.TempDir()
	model := strings.Replace(defaultModelYAML(t, "{}"), "inter_op_threads: 1}", "inter_op_threads: 1, cache_dir: '"+cache+"'}", 1)
	g := startGateway(t, "models:\n"+model)
	choice := regexp.MustCompile(`msg="batch size chosen" model=mobilenet_v3_small version=1 max_batch_size=(\d+) configured=auto curve="([^"]+)" run_limit=25ms measured_in=\S+`)
	m := choice.FindStringSubmatch(g.log())
	if m == nil {
		t.Fatalf("no choice logged:\n%s", g.log())
	}
	entries, _ := filepath.Glob(filepath.Join(cache, "*.curve.json"))
	if len(entries) != 1 {
		t.Fatalf("cache folder: %v", entries)
	}
	data, err := os.ReadFile(entries[0])
	if err != nil {
		t.Fatal(err)
	}
	var curve ort.BatchCurve
	if err := json.Unmarshal(data, &curve); err != nil || len(curve.Points) == 0 {
		t.Fatalf("entry: %v\n%s", err, data)
	}
	// The rule, from its parts: ort's choice under the run limit (half the adaptive window's
	// 50 ms), raised to 2 where a run of 2 fits.
	limit := 25 * time.Millisecond
	want := curve.Choose(limit)
	if len(curve.Points) > 1 && want < 2 && curve.Points[1].Run <= limit {
		want = 2
	}
	if m[1] != strconv.Itoa(want) || m[2] != curve.String() {
		t.Fatalf("logged %s (%s); the entry's curve %s gives %d", m[1], m[2], curve, want)
	}

	// The model's configuration, its metrics.
	var cfg struct {
		MaxBatchSize int `json:"max_batch_size"`
		Parameters   map[string]struct {
			StringValue string `json:"string_value"`
		} `json:"parameters"`
	}
	if a := g.do("GET", "/v2/models/mobilenet_v3_small/config", "", nil); a.status != 200 || json.Unmarshal(a.body, &cfg) != nil {
		t.Fatalf("config: %d %s", a.status, a.body)
	}
	if cfg.MaxBatchSize != want || !strings.HasPrefix(cfg.Parameters["batching.max_batch_size"].StringValue, fmt.Sprintf("%d (default: auto, measured in ", want)) ||
		!strings.HasPrefix(cfg.Parameters["batching.batch_curve"].StringValue, curve.String()+"; run limit 25ms") {
		t.Errorf("config: max_batch_size %d, parameters %v", cfg.MaxBatchSize, cfg.Parameters)
	}
	text := g.metricsText()
	if v := series(text, `gateway_max_batch_size{model="mobilenet_v3_small",version="1"}`); v != float64(want) {
		t.Errorf("gateway_max_batch_size %v, want %d", v, want)
	}
	for _, p := range curve.Points {
		s := fmt.Sprintf(`gateway_batch_run_per_image_seconds{model="mobilenet_v3_small",version="1",batch="%d"}`, p.Batch)
		if v := series(text, s); v != p.PerImage().Seconds() {
			t.Errorf("%s = %v, want %v", s, v, p.PerImage().Seconds())
		}
	}
	sigterm(t, g)

	// A second start reads the curve; -check and -print-config say the choice.
	g = startGateway(t, "models:\n"+model)
	if !strings.Contains(g.log(), fmt.Sprintf(`msg="batch size chosen" model=mobilenet_v3_small version=1 max_batch_size=%d configured=auto curve=%q run_limit=25ms cached=true`, want, curve.String())) {
		t.Errorf("second start:\n%s", g.log())
	}
	sigterm(t, g)
	path := filepath.Join(t.TempDir(), "g.yaml")
	os.WriteFile(path, []byte("models:\n"+model), 0o644)
	if out, err := runCheck(t, "-config", path); err != nil || !strings.Contains(out, fmt.Sprintf("1 instance(s); max_batch_size auto: %d (version 1)\n", want)) {
		t.Errorf("-check: %v\n%s", err, out)
	}
	out, err := exec.Command(gatewayBin(t), "-config", path, "-print-config").Output()
	if err != nil || !strings.Contains(string(out), "max_batch_size: auto\n") ||
		!strings.Contains(string(out), fmt.Sprintf("max_batch_size: auto is %d on this machine: %s; run limit 25ms", want, curve.String())) {
		t.Errorf("-print-config: %v\n%s", err, out)
	}

	// A number wins: nothing measured, nothing logged about it.
	g = startGateway(t, "models:\n"+strings.Replace(model, "batching: {}", "batching: {max_batch_size: 3}", 1))
	if strings.Contains(g.log(), "batch size chosen") || g.metric("gateway_max_batch_size", `model="mobilenet_v3_small"`) != 3 ||
		strings.Contains(g.metricsText(), "gateway_batch_run_per_image_seconds") {
		t.Errorf("max_batch_size: 3:\n%s", g.log())
	}
}
