package deploy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// TestMonitoringOnGateway checks the queries of monitoring/ (every rule, every dashboard panel
// and variable) against a running gateway:
//   - the real gateway binary (GATEWAY_BIN, or built here) serving the committed model on a
//     loopback port, and a real Prometheus server (Debian's; in CI it is installed) scraping it
//     and evaluating monitoring/*.yaml every 500 ms;
//   - traffic that makes each kind of series exist: predictions, a bad image (415), an unknown
//     model (404), a request refused at admission because its deadline cannot be met (503), and
//     a reload in which a model fails to load;
//   - names, from the scrape: every metric an expression selects is one the gateway exports (a
//     histogram's _bucket, _sum or _count), one a recording rule writes, or one Prometheus
//     writes for each target (up); each selector's label matchers match some exported series;
//     and each label value a matcher spells out is one the gateway uses;
//   - on Prometheus: every rule evaluates without error; every recorded series and every
//     dashboard query returns series, with the labels its legend names; each alert's operands
//     return series; and the alerts firing are exactly those the failed reload causes.
//
// Adding a panel or a rule needs no change here; a metric that only exists after some event
// needs that event in the traffic below.
func TestMonitoringOnGateway(t *testing.T) {
	files := readRuleFiles(t)
	recorded := recordedNames(files)
	qs := ruleQueries(t, files)
	_, dashQs, _ := readDashboard(t, recorded)
	qs = append(qs, dashQs...)
	if t.Failed() {
		t.FailNow()
	}
	jpeg, err := os.ReadFile(filepath.Join("..", "..", "shared", "images", "skimage_rocket.jpg"))
	if err != nil {
		t.Skip("../shared (test images) is not beside the checkout:", err)
	}

	dir := t.TempDir()
	root, _ := filepath.Abs("..")
	modelDir := filepath.Join(root, "models", "mobilenet_v3_small")
	cfg := fmt.Sprintf(`models:
  - name: mobilenet_v3_small
    path: %[1]s/model.onnx
    labels: %[1]s/labels.txt
    input: {name: input, width: 224, height: 224}
    output: {name: output}
    preprocess: {resize: 256, crop: 224, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}
    batching: {max_batch_size: 2, max_queue_size: 16}
    runtime: {instances: 1, intra_op_threads: 1, inter_op_threads: 1}
`, modelDir)
	// API keys: the traffic carries one (the per-key panels); health and /metrics stay open.
	keys := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(keys, []byte("keys:\n  - {name: tenant-a, key: monitoring-test-key-0123456789}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg = "server: {api_keys: {file: " + keys + "}}\n" + cfg
	key := map[string]string{"X-API-Key": "monitoring-test-key-0123456789"}
	cfgPath := filepath.Join(dir, "gateway.yaml")
	g := startMonitoredGateway(t, cfgPath, cfg)

	var prom *prometheusServer
	if _, err := exec.LookPath("prometheus"); err == nil || os.Getenv("CI") != "" {
		prom = startPrometheus(t, strings.TrimPrefix(g.url, "http://"), files)
		// The counters' values before the traffic, so that rates and increases see it.
		prom.waitFor(t, "the first scrapes of the gateway", func() error {
			v, err := prom.query(`gateway_reloads_total{result="failed"}`)
			if err != nil || len(v) != 1 {
				return fmt.Errorf("%v %v", v, err)
			}
			return nil
		})
	}

	// The traffic.
	for range 3 {
		if st, body := g.post(t, "/predict/", "image/jpeg", jpeg, key); st != 200 {
			t.Fatalf("POST /predict/: %d %s", st, body)
		}
	}
	for _, c := range []struct {
		path, ctype string
		body        []byte
		header      map[string]string
		want        int
	}{
		{"/predict/", "application/octet-stream", []byte("not an image"), key, 415},
		{"/models/nope/predict", "image/jpeg", jpeg, key, 404},
		// 1 µs left: refused before its body is read (stage deadline, reason shed).
		{"/predict/", "image/jpeg", jpeg, map[string]string{"X-Request-Timeout": "0.001", "X-API-Key": key["X-API-Key"]}, 503},
		// No key: 401 before anything else.
		{"/predict/", "image/jpeg", jpeg, nil, 401},
	} {
		if st, body := g.post(t, c.path, c.ctype, c.body, c.header); st != c.want {
			t.Fatalf("POST %s %v: %d %s, want %d", c.path, c.header, st, body, c.want)
		}
	}
	// A model that fails to load: the reload fails, what was served stays.
	broken := cfg + fmt.Sprintf("  - name: broken\n    path: %s\n    labels: %s/labels.txt\n", filepath.Join(dir, "missing.onnx"), modelDir)
	if err := os.WriteFile(cfgPath, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, body := g.adminPost(t, "/v2/repository/reload"); st == 200 || !strings.Contains(string(body), "broken") {
		t.Fatalf("reload with a model file missing: %d %s", st, body)
	}

	exp := scrapeGateway(t, g.url)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"gateway_requests_total", map[string]string{"model": "mobilenet_v3_small", "version": "1", "code": "200"}, 3},
		{"gateway_requests_total", map[string]string{"model": "mobilenet_v3_small", "version": "1", "code": "415"}, 1},
		{"gateway_requests_total", map[string]string{"model": "_unknown", "version": "", "code": "404"}, 1},
		{"gateway_request_failures_total", map[string]string{"model": "mobilenet_v3_small", "version": "1", "reason": "shed"}, 1},
		{"gateway_refusals_total", map[string]string{"stage": "deadline"}, 1},
		{"gateway_model_load_failures_total", map[string]string{"model": "broken"}, 1},
		{"gateway_reloads_total", map[string]string{"result": "failed"}, 1},
		{"gateway_ready", map[string]string{}, 1},
		{"gateway_key_requests_total", map[string]string{"key": "tenant-a", "code": "200"}, 3},
		{"gateway_auth_refusals_total", map[string]string{"reason": "missing"}, 1},
	} {
		if v, ok := exp.value(c.name, c.labels); !ok || v != c.want {
			t.Errorf("/metrics: %s%v = %v (found %v), want %v", c.name, c.labels, v, ok, c.want)
		}
	}

	t.Run("names", func(t *testing.T) {
		for _, q := range qs {
			for _, err := range checkNames(q, exp, recorded) {
				t.Errorf("%s: %v", q.where, err)
			}
		}
	})

	t.Run("prometheus", func(t *testing.T) {
		if prom == nil {
			requireTool(t, "prometheus", "prometheus")
		}
		var rules int
		var alertNames []string
		for _, f := range files {
			for _, gr := range f.spec.Groups {
				rules += len(gr.Rules)
				for _, r := range gr.Rules {
					if r.Alert != "" {
						alertNames = append(alertNames, r.Alert)
					}
				}
			}
		}
		var report string
		prom.waitFor(t, "every rule and query to answer as expected", func() error {
			var err error
			report, err = checkOnPrometheus(prom, qs, recorded, rules)
			return err
		})
		t.Log(report)
	})
}

// targetLabels are added by Prometheus to every series of a target (job and instance; the
// Prometheus Operator's namespace, pod, service, endpoint, container), not by the gateway.
var targetLabels = map[string]bool{"job": true, "instance": true, "namespace": true, "pod": true, "service": true, "endpoint": true, "container": true}

// synthesized are the series Prometheus writes for each target and for alerts.
var synthesized = map[string]bool{"up": true, "scrape_duration_seconds": true, "scrape_samples_scraped": true,
	"scrape_samples_post_metric_relabeling": true, "scrape_series_added": true, "ALERTS": true, "ALERTS_FOR_STATE": true}

// literalValues matches a matcher value that is a literal or an alternation of literals.
var literalValues = regexp.MustCompile(`^[A-Za-z0-9_.+-]+(\|[A-Za-z0-9_.+-]+)*$`)

// checkNames checks the selectors of q against a scrape (see TestMonitoringOnGateway).
func checkNames(q query, exp scrape, recorded map[string]bool) []error {
	var errs []error
	vss, names := selectors(q.ast)
	for i, vs := range vss {
		name := names[i]
		var own []*labels.Matcher // matchers on the gateway's labels, variables left out
		for _, m := range vs.LabelMatchers {
			if m.Name != labels.MetricName && !targetLabels[m.Name] && !q.wild[m.Name] {
				own = append(own, m)
			}
		}
		switch {
		case name == "":
			errs = append(errs, fmt.Errorf("%s: select a metric by its name", vs))
			continue
		case exp.series[name] != nil:
			if !slices.ContainsFunc(exp.series[name], func(s map[string]string) bool {
				for _, m := range own {
					if !m.Matches(s[m.Name]) {
						return false
					}
				}
				return true
			}) {
				errs = append(errs, fmt.Errorf("%s: no series of %s that the gateway exports matches %v", vs, name, own))
			}
		case recorded[name], synthesized[name]:
		default:
			errs = append(errs, fmt.Errorf("%s: the gateway does not export %s, and no recording rule writes it", vs, name))
			continue
		}
		for _, m := range own {
			vals, known := exp.values[m.Name]
			if !known {
				if exp.series[name] == nil {
					continue // a label a recording rule makes (code_class)
				}
				errs = append(errs, fmt.Errorf("%s: no series of the gateway has a label %s", vs, m.Name))
				continue
			}
			regex := m.Type == labels.MatchRegexp || m.Type == labels.MatchNotRegexp
			if regex && !literalValues.MatchString(m.Value) || !regex && m.Value == "" {
				continue
			}
			for _, v := range strings.Split(m.Value, "|") {
				if !vals[v] {
					errs = append(errs, fmt.Errorf("%s: %s=%q is no value the gateway uses (it has %v)", vs, m.Name, v, slices.Sorted(maps.Keys(vals))))
				}
			}
		}
	}
	return errs
}

// checkOnPrometheus runs the checks on Prometheus once; it returns a summary, or what failed.
func checkOnPrometheus(p *prometheusServer, qs []query, recorded map[string]bool, rules int) (string, error) {
	var errs []error
	var d struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Name, Type, Health, LastError, State string
			}
		}
	}
	if err := p.api("/api/v1/rules", nil, &d); err != nil {
		return "", err
	}
	loaded := 0
	var firing []string
	for _, g := range d.Groups {
		for _, r := range g.Rules {
			loaded++
			if r.Health != "ok" {
				errs = append(errs, fmt.Errorf("rule %s (group %s): health %q %s", r.Name, g.Name, r.Health, r.LastError))
			}
			if r.Type == "alerting" && r.State == "firing" {
				firing = append(firing, r.Name)
			}
		}
	}
	if loaded != rules {
		errs = append(errs, fmt.Errorf("Prometheus loaded %d rules, the files hold %d", loaded, rules))
	}
	slices.Sort(firing)
	// The failed reload's two alerts, and nothing else: the rest of the traffic is healthy, and
	// every other alert waits longer than this test runs (for:) or sees nothing wrong.
	if want := []string{"ImagegateModelLoadFailed", "ImagegateReloadFailed"}; !slices.Equal(firing, want) {
		errs = append(errs, fmt.Errorf("alerts firing: %v, want %v", firing, want))
	}
	for name := range recorded {
		if v, err := p.query(name); err != nil || len(v) == 0 {
			errs = append(errs, fmt.Errorf("recorded series %s: %d series, %v", name, len(v), err))
		}
	}
	operands := 0
	for _, q := range qs {
		exprs := []parser.Expr{q.ast}
		if q.alert {
			exprs = conditionOperands(q.ast)
		} else if strings.Contains(q.where, ": record ") {
			continue // checked by name above
		}
		for _, e := range exprs {
			operands++
			v, err := p.query(e.String())
			if err != nil || len(v) == 0 {
				errs = append(errs, fmt.Errorf("%s: %s returns %d series, %v", q.where, e, len(v), err))
				continue
			}
			for _, l := range legendLabels(q.legend) {
				for _, s := range v {
					if s.Metric[l] == "" {
						errs = append(errs, fmt.Errorf("%s: the legend names {{%s}}, which series %v lacks", q.where, l, s.Metric))
						break
					}
				}
			}
		}
	}
	return fmt.Sprintf("Prometheus: %d rules healthy, %d recorded series and %d queries and alert operands returning series; firing: %v",
		loaded, len(recorded), operands, firing), errors.Join(errs...)
}

// scrape is one /metrics body, parsed by Prometheus' own text parser.
type scrape struct {
	fams   map[string]*dto.MetricFamily
	series map[string][]map[string]string // by sample name (a histogram's _bucket, _sum, _count)
	values map[string]map[string]bool     // every value of each label
}

func scrapeGateway(t *testing.T, base string) scrape {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	s := scrape{fams: fams, series: map[string][]map[string]string{}, values: map[string]map[string]bool{}}
	add := func(name string, ls map[string]string) {
		s.series[name] = append(s.series[name], ls)
		for k, v := range ls {
			if s.values[k] == nil {
				s.values[k] = map[string]bool{}
			}
			s.values[k][v] = true
		}
	}
	for name, mf := range fams {
		for _, m := range mf.Metric {
			ls := map[string]string{}
			for _, l := range m.Label {
				ls[l.GetName()] = l.GetValue()
			}
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				add(name+"_sum", ls)
				add(name+"_count", ls)
				for _, b := range m.GetHistogram().GetBucket() { // +Inf included, formatted "+Inf"
					bl := maps.Clone(ls)
					bl["le"] = strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)
					add(name+"_bucket", bl)
				}
			case dto.MetricType_SUMMARY:
				add(name, ls)
				add(name+"_sum", ls)
				add(name+"_count", ls)
			default:
				add(name, ls)
			}
		}
	}
	return s
}

// value returns the value of the counter or gauge series with exactly these labels.
func (s scrape) value(name string, want map[string]string) (float64, bool) {
	mf := s.fams[name]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.Metric {
		ls := map[string]string{}
		for _, l := range m.Label {
			ls[l.GetName()] = l.GetValue()
		}
		if len(ls) != len(want) {
			continue
		}
		match := true
		for k, v := range want {
			if ls[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// monitoredGateway is the gateway binary on loopback ports, with its admin API.
type monitoredGateway struct {
	url, admin string
}

func startMonitoredGateway(t *testing.T, cfgPath, cfg string) *monitoredGateway {
	t.Helper()
	lib := os.Getenv("ONNXRUNTIME_LIB")
	if lib == "" {
		lib, _ = filepath.Abs(filepath.Join("..", ".deps", "onnxruntime", "libonnxruntime.so"))
	}
	if _, err := os.Stat(lib); err != nil {
		t.Skip("ONNX Runtime is not installed (scripts/setup-onnxruntime.sh, or set ONNXRUNTIME_LIB):", err)
	}
	bin := os.Getenv("GATEWAY_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "gateway")
		build := exec.Command("go", "build", "-o", bin, "./cmd/gateway")
		build.Dir = ".."
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/gateway: %v\n%s", err, out)
		}
	}
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-config", cfgPath, "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0")
	// gRPC on a free port too, not the default 8001 that another gateway may hold (a build
	// without gRPC ignores the variable).
	cmd.Env = append(os.Environ(), "ONNXRUNTIME_LIB="+lib, "IMAGEGATE_GRPC_LISTEN=127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logs bytes.Buffer
	done := make(chan error, 1)
	addrs := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		reAdmin := regexp.MustCompile(`msg=admin addr=(\S+)`)
		reServing := regexp.MustCompile(`msg=serving addr=(\S+)`)
		var admin string
		for sc.Scan() {
			mu.Lock()
			logs.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := reAdmin.FindStringSubmatch(sc.Text()); m != nil {
				admin = m[1]
			}
			if m := reServing.FindStringSubmatch(sc.Text()); m != nil {
				addrs <- [2]string{m[1], admin}
			}
		}
		done <- cmd.Wait()
		close(addrs)
	}()
	log := func() string { mu.Lock(); defer mu.Unlock(); return logs.String() }
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", log())
		}
	})
	select {
	case a, ok := <-addrs:
		if !ok {
			t.Fatalf("the gateway exited before serving:\n%s", log())
		}
		if a[1] == "" {
			t.Fatalf("the gateway logged no admin address:\n%s", log())
		}
		return &monitoredGateway{url: "http://" + a[0], admin: "http://" + a[1]}
	case <-time.After(60 * time.Second):
		t.Fatalf("the gateway did not start in 60s:\n%s", log())
	}
	return nil
}

var monitoringClient = &http.Client{Timeout: 30 * time.Second}

func (g *monitoredGateway) post(t *testing.T, path, ctype string, body []byte, header map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", g.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := monitoringClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (g *monitoredGateway) adminPost(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := monitoringClient.Post(g.admin+path, "application/json", nil)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// prometheusServer is Debian's Prometheus on a loopback port, with the rule files loaded.
type prometheusServer struct {
	base   string
	exited chan error
	log    string
}

func startPrometheus(t *testing.T, target string, files []ruleFile) *prometheusServer {
	t.Helper()
	bin := requireTool(t, "prometheus", "prometheus")
	dir := t.TempDir()
	var ruleFiles []string
	for _, f := range files {
		abs, _ := filepath.Abs(f.path)
		ruleFiles = append(ruleFiles, strconv.Quote(abs))
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 500ms
  scrape_timeout: 400ms
  evaluation_interval: 500ms
rule_files: [%s]
scrape_configs:
  - job_name: imagegate
    static_configs:
      - targets: ['%s']
`, strings.Join(ruleFiles, ", "), target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := &prometheusServer{base: "http://" + addr, exited: make(chan error, 1), log: filepath.Join(dir, "prometheus.log")}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-p.exited
		}
	})
	p.waitFor(t, "the gateway target to be up", func() error {
		v, err := p.query("up")
		if err != nil || len(v) != 1 || v[0].Value[1] != "1" {
			return fmt.Errorf("up: %v %v", v, err)
		}
		return nil
	})
	return p
}

// waitFor retries check until it passes, for up to 2 minutes (a condition, not a speed: a
// slow machine waits longer), and fails with its last error and Prometheus' log.
func (p *prometheusServer) waitFor(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case e := <-p.exited:
			b, _ := os.ReadFile(p.log)
			t.Fatalf("prometheus exited (%v):\n%s", e, b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(p.log)
			t.Fatalf("waiting for %s: %v\nprometheus log:\n%s", what, err, b)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// api calls an endpoint of Prometheus' HTTP API and decodes its data.
func (p *prometheusServer) api(path string, q url.Values, data any) error {
	resp, err := monitoringClient.Get(p.base + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var env struct {
		Status    string
		Data      json.RawMessage
		ErrorType string
		Error     string
	}
	if err := json.Unmarshal(b, &env); err != nil || env.Status != "success" {
		return fmt.Errorf("%s %v: %d %.300s", path, q, resp.StatusCode, b)
	}
	return json.Unmarshal(env.Data, data)
}

type promSample struct {
	Metric map[string]string
	Value  []any
}

// query runs an instant query; an answer that is not a vector is an error.
func (p *prometheusServer) query(expr string) ([]promSample, error) {
	var d struct {
		ResultType string
		Result     []promSample
	}
	if err := p.api("/api/v1/query", url.Values{"query": {expr}}, &d); err != nil {
		return nil, err
	}
	if d.ResultType != "vector" {
		return nil, fmt.Errorf("%s: a %s, want a vector", expr, d.ResultType)
	}
	return d.Result, nil
}
