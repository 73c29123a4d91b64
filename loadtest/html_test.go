package loadtest

import (
	"bytes"
	"context"
	"encoding/xml"
	"image"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// syntheticResult builds a 6-second open-loop result without a network:
// latency grows over time, a few requests fail.
func syntheticResult() *Result {
	cfg := Config{URL: "http://127.0.0.1:1/predict/", Rate: 100, Requests: 600, KeepAlive: true}
	if err := cfg.normalize(); err != nil {
		panic(err)
	}
	p := newPacer(&cfg, time.Now())
	c := newCollector(&cfg, p)
	for i := range int64(600) {
		intended := i * int64(10*time.Millisecond)
		lat := int64(time.Millisecond) * (2 + i/40 + (i%10)*(i%10))
		s := sample{intended: intended, sent: intended + 50_000, done: intended + lat, status: 200, bytesIn: 10}
		if i%97 == 0 {
			s.status = 503
		}
		c.add(s)
	}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return c.result(start, start.Add(6*time.Second), cpuTimes{user: time.Second})
}

func checkStandaloneHTML(t *testing.T, page string) {
	t.Helper()
	for _, banned := range []string{"<script", "<link", "src=", "url(", "@import", "@font-face"} {
		if strings.Contains(page, banned) {
			t.Errorf("page contains %q: it must not load anything", banned)
		}
	}
	// Every inline SVG must be well-formed XML.
	rest, n := page, 0
	for {
		i := strings.Index(rest, "<svg")
		if i < 0 {
			break
		}
		j := strings.Index(rest[i:], "</svg>")
		if j < 0 {
			t.Fatal("unterminated <svg>")
		}
		d := xml.NewDecoder(strings.NewReader(rest[i : i+j+len("</svg>")]))
		for {
			if _, err := d.Token(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("svg %d is not well-formed: %v", n, err)
			}
		}
		rest, n = rest[i+j:], n+1
	}
	if n == 0 {
		t.Fatal("no <svg> chart in page")
	}
}

func TestHTMLReportIsStandalone(t *testing.T) {
	var b bytes.Buffer
	if err := syntheticResult().WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	checkStandaloneHTML(t, b.String())
	for _, want := range []string{colorOK, colorP50, colorP99, colorCurve, "Throughput per second", "Latency distribution"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

const chromiumPath = "/usr/bin/chromium"

// screenshot renders an HTML page with headless Chromium at 1200x900.
func screenshot(t *testing.T, page []byte) image.Image {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("skipping: %s not found (apt-get install -y chromium to run this test)", chromiumPath)
	}
	dir := t.TempDir()
	htmlPath := filepath.Join(dir, "report.html")
	pngPath := filepath.Join(dir, "out.png")
	if err := os.WriteFile(htmlPath, page, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromiumPath, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--force-device-scale-factor=1", "--hide-scrollbars",
		"--screenshot="+pngPath, "--window-size=1200,900", "file://"+htmlPath)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatalf("no screenshot: %v\n%s", err, out)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 1200 || b.Dy() != 900 {
		t.Fatalf("screenshot is %v, want 1200x900", b)
	}
	return img
}

// countColor counts pixels in r within tol (per channel) of hex "#rrggbb".
func countColor(img image.Image, r image.Rectangle, hex string, tol int) int {
	var want [3]int
	for i := range 3 {
		var v int
		for _, c := range hex[1+2*i : 3+2*i] {
			v = v*16 + strings.IndexRune("0123456789abcdef", c)
		}
		want[i] = v
	}
	n := 0
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			got := [3]int{int(cr >> 8), int(cg >> 8), int(cb >> 8)}
			ok := true
			for i := range 3 {
				if d := got[i] - want[i]; d > tol || d < -tol {
					ok = false
				}
			}
			if ok {
				n++
			}
		}
	}
	return n
}

func nonWhite(img image.Image) float64 {
	b := img.Bounds()
	n := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 < 240 || g>>8 < 240 || bl>>8 < 240 {
				n++
			}
		}
	}
	return float64(n) / float64(b.Dx()*b.Dy())
}

func TestHTMLReportRendersInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping Chromium rendering in -short mode")
	}
	t.Run("run", func(t *testing.T) {
		var b bytes.Buffer
		if err := syntheticResult().WriteHTML(&b); err != nil {
			t.Fatal(err)
		}
		img := screenshot(t, b.Bytes())
		if f := nonWhite(img); f < 0.03 {
			t.Fatalf("page looks blank: %.1f%% non-white pixels", f*100)
		}
		// Layout: two charts per row, 560x280 each, under a short header.
		left, right := image.Rect(0, 40, 600, 420), image.Rect(590, 40, 1200, 420)
		below := image.Rect(0, 330, 600, 760)
		for _, c := range []struct {
			what  string
			r     image.Rectangle
			color string
		}{
			{"throughput line (top left)", left, colorOK},
			{"p50 line (top right)", right, colorP50},
			{"p99 line (top right)", right, colorP99},
			{"percentile curve (second row, left)", below, colorCurve},
		} {
			if n := countColor(img, c.r, c.color, 12); n < 40 {
				t.Errorf("%s: only %d pixels of %s in %v", c.what, n, c.color, c.r)
			}
		}
		// Negative control: the throughput color is not in the latency chart.
		if n := countColor(img, image.Rect(640, 80, 1200, 420), colorOK, 12); n > 20 {
			t.Errorf("throughput color found %d times in the latency chart", n)
		}
	})
	t.Run("sweep", func(t *testing.T) {
		sr := &SweepResult{Kind: "concurrency", Config: ReportConfig{Method: "GET", URL: "http://127.0.0.1:1/"}}
		for i, c := range []int{1, 8, 50} {
			sr.Steps = append(sr.Steps, SweepStep{Concurrency: c, Summary: Summary{
				Throughput: float64(100 * (i + 1)),
				Latency:    LatencyStats{P50: float64(2 + i*3), P99: float64(5 + i*10)},
			}})
		}
		var b bytes.Buffer
		if err := sr.WriteHTML(&b); err != nil {
			t.Fatal(err)
		}
		checkStandaloneHTML(t, b.String())
		img := screenshot(t, b.Bytes())
		if n := countColor(img, image.Rect(0, 40, 600, 420), colorP99, 12); n < 40 {
			t.Errorf("p99 curve: only %d pixels of %s", n, colorP99)
		}
	})
}

func TestEmptyResultRenders(t *testing.T) {
	cfg := Config{URL: "http://127.0.0.1:1/", Requests: 1}
	if err := cfg.normalize(); err != nil {
		t.Fatal(err)
	}
	r := newCollector(&cfg, newPacer(&cfg, time.Now())).result(time.Now(), time.Now(), cpuTimes{})
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	checkStandaloneHTML(t, b.String())
	if strings.Contains(b.String(), "NaN") {
		t.Error("empty report contains NaN")
	}
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
}
