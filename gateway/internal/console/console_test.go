package console

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
)

// maxAssetBytes bounds what the console embeds in the binary (issue 36).
const maxAssetBytes = 300 << 10

// TestAssets: the embedded files weigh 300 KB at most, each has its content type, the page
// and its modules name only files that exist, and nothing in them points at another host.
func TestAssets(t *testing.T) {
	total := 0
	for _, n := range Names() {
		a, ok := Lookup(n)
		if !ok {
			t.Fatalf("%s listed but not found", n)
		}
		total += len(a.Body)
		if a.ContentType == "application/octet-stream" || !strings.HasPrefix(a.ETag, `"`) {
			t.Errorf("%s: content type %q, ETag %q", n, a.ContentType, a.ETag)
		}
		if a.Gzip != nil {
			zr, err := gzip.NewReader(bytes.NewReader(a.Gzip))
			if err != nil {
				t.Fatal(err)
			}
			if plain, _ := io.ReadAll(zr); !bytes.Equal(plain, a.Body) {
				t.Errorf("%s: the gzip copy differs", n)
			}
		}
		// No other host: no URL with a scheme or a network path, but the SVG namespace
		// (a name, never fetched).
		body := strings.ReplaceAll(string(a.Body), `"http://www.w3.org/2000/svg"`, "")
		if m := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`).FindString(body); m != "" {
			t.Errorf("%s names another host: %s", n, m)
		}
		for _, banned := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
			if strings.Contains(body, banned) {
				t.Errorf("%s uses %s: build elements with h() (text is never parsed as HTML)", n, banned)
			}
		}
	}
	t.Logf("%d files, %d bytes embedded", len(Names()), total)
	if total > maxAssetBytes || total == 0 {
		t.Errorf("the console embeds %d bytes, more than %d", total, maxAssetBytes)
	}
	page, ok := Lookup("")
	if !ok || page.Name != "index.html" {
		t.Fatal("no page at /ui/")
	}
	// Every file the page and the modules refer to is embedded.
	refs := regexp.MustCompile(`(?:src|href)="([^"#:]+)"|from "\./([^"]+)"`)
	for _, n := range Names() {
		a, _ := Lookup(n)
		for _, m := range refs.FindAllStringSubmatch(string(a.Body), -1) {
			ref := m[1] + m[2]
			if strings.HasPrefix(ref, "/") {
				continue // the gateway's own paths (/metrics)
			}
			if _, ok := Lookup(ref); !ok {
				t.Errorf("%s refers to %s, which is not embedded", n, ref)
			}
		}
	}
}

// TestParse: a snapshot holds what the exposition says, per model version and for the server,
// histograms in order with +Inf last; other series, comments and unreadable lines are left.
func TestParse(t *testing.T) {
	set := metrics.NewSet()
	set.NewCounter(`gateway_requests_total{model="m",version="1",code="200"}`).Add(7)
	set.NewCounter(`gateway_requests_total{model="m",version="1",code="503"}`).Add(2)
	set.NewCounter(`gateway_request_failures_total{model="m",version="1",reason="queue_full"}`).Add(2)
	set.NewCounter(`gateway_requests_total{model="_unknown",version="",code="404"}`).Add(3)
	set.NewCounter(`gateway_refusals_total{stage="queue"}`).Add(5)
	set.NewGauge(`gateway_queue_length{model="m",version="1"}`, func() float64 { return 4 })
	set.NewGauge(`gateway_queue_length{model="m \"quoted\"",version="2"}`, func() float64 { return 1 })
	set.NewGauge(`gateway_inflight_bytes`, func() float64 { return 1024 })
	set.NewCounter(`gateway_model_load_failures_total{model="m"}`).Inc()
	h := set.NewPrometheusHistogramExt(`gateway_batch_size{model="m",version="1"}`, []float64{1, 2, 4, 8})
	for _, v := range []float64{1, 2, 3, 3, 8, 9} {
		h.Update(v)
	}
	set.NewCounter(`other_total`).Inc()
	var b bytes.Buffer
	set.WritePrometheus(&b)
	b.WriteString("# HELP x\nnot a sample\nprocess_cpu_seconds_total 1.5\nprocess_resident_memory_bytes 4096\ngo_goroutines 9\n")
	var s Snapshot
	Parse(b.Bytes(), &s)
	if len(s.Models) != 2 || s.Models[0].Name != "m" || s.Models[0].Version != "1" || s.Models[1].Name != `m "quoted"` || s.Models[1].Values["queue_length"] != 1 {
		t.Fatalf("models: %+v", s.Models)
	}
	m := s.Models[0]
	if m.By["requests_total"]["200"] != 7 || m.By["requests_total"]["503"] != 2 || m.By["request_failures_total"]["queue_full"] != 2 || m.Values["queue_length"] != 4 {
		t.Errorf("model series: %+v", m.Series)
	}
	bs := m.Hist["batch_size"]
	if bs == nil || !equal(bs.Le, []float64{1, 2, 4, 8}) || !equal(bs.Counts, []float64{1, 2, 4, 5, 6}) || bs.Count != 6 || bs.Sum != 26 {
		t.Errorf("batch sizes: %+v", bs)
	}
	if s.Unknown.By["requests_total"]["404"] != 3 || s.Server.By["refusals_total"]["queue"] != 5 || s.Server.Values["inflight_bytes"] != 1024 ||
		s.Server.By["model_load_failures_total"]["m"] != 1 {
		t.Errorf("server: %+v, unknown: %+v", s.Server, s.Unknown)
	}
	if s.Process.Values["cpu_seconds_total"] != 1.5 || s.Process.Values["resident_memory_bytes"] != 4096 || len(s.Process.Values) != 2 {
		t.Errorf("process: %+v", s.Process)
	}
	if _, ok := s.Server.Values["other_total"]; ok {
		t.Error("a series not of the gateway's families was kept")
	}
	if _, err := json.Marshal(&s); err != nil {
		t.Fatal(err)
	}
}

// TestParseLines: labels with escapes, timestamps, and lines a parser must refuse.
func TestParseLines(t *testing.T) {
	for _, c := range []struct {
		line   string
		ok     bool
		name   string
		labels int
		value  float64
	}{
		{`a 1`, true, "a", 0, 1},
		{`a{x="1",y="q\"\\\n"} 2.5 1700000000`, true, "a", 2, 2.5},
		{`a{x="1",} 3`, true, "a", 1, 3},
		{`a{x="1" 3`, false, "", 0, 0},
		{`a{x=1} 3`, false, "", 0, 0},
		{`a NaN`, false, "", 0, 0},
		{`a +Inf`, false, "", 0, 0},
		{`{x="1"} 3`, false, "", 0, 0},
		{`a`, false, "", 0, 0},
		{`# TYPE a counter`, false, "", 0, 0},
	} {
		sm, ok := parseLine([]byte(c.line))
		if ok != c.ok || (ok && (sm.name != c.name || len(sm.labels) != c.labels || sm.value != c.value)) {
			t.Errorf("%q: %+v %v", c.line, sm, ok)
		}
		if c.labels == 2 && sm.labels[1][1] != "q\"\\\n" {
			t.Errorf("%q: label value %q", c.line, sm.labels[1][1])
		}
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
