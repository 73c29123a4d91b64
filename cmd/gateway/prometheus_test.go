package main_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Prometheus as Prometheus expects: the gateway's /metrics checked by promtool and scraped
// by a real Prometheus server, when they are installed (Debian's `prometheus` package has
// both; scripts/setup.sh test installs it).

// metricsText returns the gateway's /metrics body.
func (g *gateway) metricsText() string {
	g.t.Helper()
	a := g.do("GET", "/metrics", "", nil)
	if a.status != 200 || !strings.HasPrefix(a.header.Get("Content-Type"), "text/plain") {
		g.t.Fatalf("/metrics: %d %s %.200s", a.status, a.header.Get("Content-Type"), a.body)
	}
	return string(a.body)
}

// series returns the value of one exact series (name{labels} as written), or -1.
func series(text, s string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, s+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// TestPromtoolCheckMetrics drives every kind of answer through the real gateway, then checks
// its /metrics: `promtool check metrics` reports nothing for the gateway_* families; every
// family's HELP names exactly the label values its series have ("by reason: a, b."), one
// spelling each; and a 404 or 405 is counted the same way in every request family, on
// inference paths only.
func TestPromtoolCheckMetrics(t *testing.T) {
	shared := sharedDir(t)
	jpeg, _ := os.ReadFile(filepath.Join(shared, "images", "skimage_rocket.jpg"))
	g := startGateway(t, "models:\n"+defaultModelYAML(t, "{max_batch_size: 4, max_queue_delay: 1ms}"))
	const m = `model="mobilenet_v3_small",version="1"`
	const unknown = `model="_unknown",version=""`
	v2body := []byte(`{"inputs":[{"name":"input","shape":[1],"datatype":"BYTES","data":["` + b64(jpeg) + `"]}]}`)
	for _, c := range []struct {
		method, path string
		body         []byte
		want         int
	}{
		{"POST", "/predict/", jpeg, 200},
		{"POST", "/models/mobilenet_v3_small/predict", jpeg, 200},
		{"POST", "/v2/models/mobilenet_v3_small/infer", v2body, 200},
		{"POST", "/v2/models/mobilenet_v3_small.tensor/versions/1/infer", v2body, 400},
		{"POST", "/predict/", []byte("not an image"), 415},
		// inference paths: counted
		{"GET", "/predict/", nil, 405},
		{"GET", "/models/mobilenet_v3_small/predict", nil, 405},
		{"GET", "/v2/models/mobilenet_v3_small/infer", nil, 405},
		{"POST", "/models/nope/predict", jpeg, 404},
		{"POST", "/v2/models/nope/infer", v2body, 404},
		{"POST", "/v2/models/mobilenet_v3_small/versions/9/infer", v2body, 404},
		// metadata, readiness and unknown paths: not inference requests, not counted
		{"GET", "/v2/models/nope", nil, 404},
		{"GET", "/v2/models/mobilenet_v3_small/versions/9", nil, 404},
		{"GET", "/v2/models/nope/ready", nil, 404},
		{"GET", "/models/nope", nil, 404},
		{"POST", "/nowhere", jpeg, 404},
		{"POST", "/v2", nil, 405},
	} {
		if a := g.do(c.method, c.path, "application/octet-stream", c.body); a.status != c.want {
			t.Fatalf("%s %s: %d %s, want %d", c.method, c.path, a.status, a.body, c.want)
		}
	}
	text := g.metricsText()

	// One way of counting 404 and 405, the same in every request family.
	for _, c := range []struct {
		series string
		want   float64
	}{
		{`gateway_requests_total{` + m + `,code="200"}`, 3},
		{`gateway_requests_total{` + m + `,code="400"}`, 1},
		{`gateway_requests_total{` + m + `,code="415"}`, 1},
		{`gateway_requests_total{` + m + `,code="405"}`, 3},
		{`gateway_requests_total{` + m + `,code="404"}`, 0},
		{`gateway_requests_total{` + unknown + `,code="404"}`, 3},
		{`gateway_requests_total{` + unknown + `,code="405"}`, 0},
		{`gateway_request_success_total{` + m + `}`, 3},
		{`gateway_request_failures_total{` + m + `,reason="bad_input"}`, 2},
		{`gateway_request_failures_total{` + m + `,reason="not_found"}`, 3},
		{`gateway_request_failures_total{` + unknown + `,reason="not_found"}`, 3},
		{`gateway_request_duration_seconds_count{` + m + `}`, 8},
		{`gateway_request_duration_seconds_count{` + unknown + `}`, 3},
	} {
		if v := series(text, c.series); v != c.want {
			t.Errorf("%s = %v, want %v", c.series, v, c.want)
		}
	}

	// Label values: one spelling each, and exactly those each family's HELP names.
	help := map[string]string{}
	values := map[string]map[string]map[string]bool{} // family -> label -> values
	helpRE := regexp.MustCompile(`^# HELP (gateway_\w+) (.*)$`)
	sampleRE := regexp.MustCompile(`^(gateway_\w+?)(?:_bucket|_sum|_count)?\{(.*)\} `)
	labelRE := regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)
	for _, line := range strings.Split(text, "\n") {
		if h := helpRE.FindStringSubmatch(line); h != nil {
			help[h[1]] = h[2]
			continue
		}
		s := sampleRE.FindStringSubmatch(line)
		if s == nil {
			continue
		}
		fam := s[1]
		if _, ok := help[fam]; !ok { // _bucket/_sum/_count of a histogram whose name was matched short
			for f := range help {
				if strings.HasPrefix(line, f) {
					fam = f
				}
			}
		}
		for _, l := range labelRE.FindAllStringSubmatch(s[2], -1) {
			if values[fam] == nil {
				values[fam] = map[string]map[string]bool{}
			}
			if values[fam][l[1]] == nil {
				values[fam][l[1]] = map[string]bool{}
			}
			values[fam][l[1]][l[2]] = true
		}
	}
	listed := regexp.MustCompile(`by (reason|stage): ([a-z_]+(?:, [a-z_]+)*)\.`)
	all := map[string]bool{}
	for fam, h := range help {
		if h == "" {
			t.Errorf("%s has no HELP text", fam)
		}
		for _, l := range listed.FindAllStringSubmatch(h, -1) {
			want := strings.Split(l[2], ", ")
			var got []string
			for v := range values[fam][l[1]] {
				got = append(got, v)
				all[v] = true
			}
			sort.Strings(want)
			sort.Strings(got)
			if !slices.Equal(got, want) {
				t.Errorf("%s: its HELP lists %s %v, its series have %v", fam, l[1], want, got)
			}
		}
		if values[fam]["reason"] != nil && !listed.MatchString(h) {
			t.Errorf("%s has reason labels its HELP does not list: %q", fam, h)
		}
	}
	for v := range all {
		if strings.Contains(v, "cancelled") || strings.Contains(v, "-") {
			t.Errorf("label value %q: one spelling (canceled, snake_case)", v)
		}
	}

	// docs/metrics.md's tables are held to these families, types and labels by TestDocsMetricsMatchTheGateway.

	// promtool.
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian package prometheus; scripts/setup.sh test installs it): label and counting checks passed, the lint was not run")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	out, err := cmd.CombinedOutput()
	var ours, others []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch {
		case line == "":
		case strings.HasPrefix(line, "gateway_"), !strings.HasPrefix(line, "go_") && !strings.HasPrefix(line, "process_"):
			ours = append(ours, line)
		default:
			others = append(others, line)
		}
	}
	if len(ours) > 0 {
		t.Errorf("promtool check metrics (%v) on the gateway's families:\n%s", err, strings.Join(ours, "\n"))
	}
	t.Logf("promtool: nothing on gateway_*; %d remarks on the go_*/process_* families written by VictoriaMetrics/metrics (no HELP, _count/_total suffixes)", len(others))
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// promAPI calls a Prometheus HTTP API endpoint and decodes its data field.
func promAPI(base, path string, q url.Values, data any) error {
	resp, err := http.Get(base + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var env struct {
		Status string
		Data   json.RawMessage
		Error  string
	}
	if err := json.Unmarshal(b, &env); err != nil || env.Status != "success" {
		return fmt.Errorf("%s: %d %.300s", path, resp.StatusCode, b)
	}
	return json.Unmarshal(env.Data, data)
}

// TestPromtoolPrometheusScrape starts a real Prometheus server on loopback scraping the
// gateway every 500 ms, and checks through its HTTP API that the target is up, that the
// metadata API knows gateway_requests_total as a counter (and a histogram and a gauge as
// such) with the gateway's HELP, and that a query returns the gateway's series with the
// values it counted.
func TestPromtoolPrometheusScrape(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("the Prometheus server is not installed (Debian package prometheus; scripts/setup.sh test installs it)")
	}
	shared := sharedDir(t)
	jpeg, _ := os.ReadFile(filepath.Join(shared, "images", "skimage_rocket.jpg"))
	g := startGateway(t, "models:\n"+defaultModelYAML(t, "{max_batch_size: 4, max_queue_delay: 1ms}"))
	for range 3 {
		if a := g.do("POST", "/predict/", "image/jpeg", jpeg); a.status != 200 {
			t.Fatalf("predict: %d %s", a.status, a.body)
		}
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	target := strings.TrimPrefix(g.url, "http://")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 500ms
  scrape_timeout: 400ms
scrape_configs:
  - job_name: imagegate
    static_configs:
      - targets: ['%s']
`, target)), 0o644)
	base := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+strings.TrimPrefix(base, "http://"), "--log.level=warn")
	logs, _ := os.Create(filepath.Join(dir, "prometheus.log"))
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	// Bounded waits (a condition, not a speed: a slow machine waits longer, up to 30 s).
	deadline := time.Now().Add(30 * time.Second)
	wait := func(what string, cond func() error) {
		t.Helper()
		for {
			err := cond()
			if err == nil {
				return
			}
			select {
			case e := <-exited:
				b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
				t.Fatalf("prometheus exited (%v):\n%s", e, b)
			default:
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
				t.Fatalf("%s: %v\nprometheus log:\n%s", what, err, b)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	wait("the target is scraped and up", func() error {
		var d struct {
			ActiveTargets []struct {
				Health    string
				LastError string
				ScrapeURL string
			}
		}
		if err := promAPI(base, "/api/v1/targets", url.Values{}, &d); err != nil {
			return err
		}
		if len(d.ActiveTargets) != 1 || d.ActiveTargets[0].Health != "up" {
			return fmt.Errorf("targets %+v", d.ActiveTargets)
		}
		return nil
	})
	want := map[string]string{"gateway_requests_total": "counter", "gateway_request_duration_seconds": "histogram", "gateway_queue_length": "gauge"}
	wait("the metadata API knows the gateway's families", func() error {
		var d map[string][]struct{ Type, Help string }
		if err := promAPI(base, "/api/v1/metadata", url.Values{}, &d); err != nil {
			return err
		}
		for name, typ := range want {
			if len(d[name]) == 0 || d[name][0].Type != typ || d[name][0].Help == "" {
				return fmt.Errorf("metadata of %s: %+v, want type %s with HELP", name, d[name], typ)
			}
		}
		return nil
	})
	wait("a query returns the gateway's series", func() error {
		var d struct {
			ResultType string
			Result     []struct {
				Metric map[string]string
				Value  []any
			}
		}
		q := url.Values{"query": {`gateway_requests_total{job="imagegate",model="mobilenet_v3_small",code="200"}`}}
		if err := promAPI(base, "/api/v1/query", q, &d); err != nil {
			return err
		}
		if d.ResultType != "vector" || len(d.Result) != 1 || len(d.Result[0].Value) != 2 || d.Result[0].Value[1] != "3" ||
			d.Result[0].Metric["version"] != "1" || d.Result[0].Metric["instance"] != target {
			return fmt.Errorf("query result %+v", d)
		}
		return nil
	})
}
