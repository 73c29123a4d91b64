// Package browsertest drives the gateway's console (gateway/internal/console) in headless
// Chromium against a real bin/gateway serving the pretrained MobileNetV2 of ../shared. It
// is a module of its own so that the browser driver (chromedp) stays out of the server's
// go.mod; `make console-test` runs it (and `make test`).
package browsertest

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"image"
	"image/color/palette"
	"image/draw"
	"image/png"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

var screenshot = flag.String("screenshot", "", "write the console's screenshot (light scheme, while requests arrive) to this PNG file")

const chromiumPath = "/usr/bin/chromium"

// browser starts headless Chromium with a fresh profile and returns a tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("skipping: %s not found (apt-get install -y chromium)", chromiumPath)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true), chromedp.Flag("force-device-scale-factor", "1"),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser and opens the tab
		t.Fatalf("cannot start %s: %v", chromiumPath, err)
	}
	return ctx
}

// recorder keeps what a tab asked for and what its console said.
type recorder struct {
	mu      sync.Mutex
	urls    []string
	errors  []string
	headers map[string]map[string]string // response headers by URL (the last response)
}

func record(t *testing.T, ctx context.Context) *recorder {
	t.Helper()
	r := &recorder{headers: map[string]map[string]string{}}
	reqs := chromedp.Events(ctx, network.RequestWillBeSent)
	resps := chromedp.Events(ctx, network.ResponseReceived)
	msgs := chromedp.Console(ctx)
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev, err := range reqs {
			if err != nil {
				return
			}
			r.mu.Lock()
			r.urls = append(r.urls, ev.Request.URL)
			r.mu.Unlock()
		}
	}()
	go func() {
		for ev, err := range resps {
			if err != nil {
				return
			}
			h := map[string]string{}
			for k, v := range ev.Response.Headers {
				h[strings.ToLower(k)] = fmt.Sprint(v)
			}
			r.mu.Lock()
			r.headers[ev.Response.URL] = h
			r.mu.Unlock()
		}
	}()
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == "error" || m.Type == "warning" {
				r.mu.Lock()
				r.errors = append(r.errors, fmt.Sprintf("%s %s:%d: %s", m.Type, m.URL, m.Line+1, m.Text))
				r.mu.Unlock()
			}
		}
	}()
	return r
}

// check fails the test for every request to another origin than base's and every console
// error or warning the page gave.
func (r *recorder) check(t *testing.T, base string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	origin, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.urls) < 5 {
		t.Errorf("only %d requests recorded: %v", len(r.urls), r.urls)
	}
	for _, u := range r.urls {
		p, err := url.Parse(u)
		switch {
		case err != nil:
			t.Errorf("request to %q: %v", u, err)
		case p.Scheme == "data" || p.Scheme == "blob":
		case p.Scheme != origin.Scheme || p.Host != origin.Host:
			t.Errorf("the page asked another host: %s (only %s is allowed)", u, base)
		}
	}
	for _, e := range r.errors {
		t.Errorf("console: %s", e)
	}
}

// eval evaluates a JavaScript expression in the tab.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// poll waits until a JavaScript expression is truthy and returns its value.
func poll[T any](t *testing.T, ctx context.Context, what, expr string, timeout time.Duration) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Poll[T](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('main') ? document.querySelector('main').innerText.slice(0, 3000) : ''`))
		t.Fatalf("waiting %v for %s (%s): %v\nthe page reads:\n%s", timeout, what, expr, err, page)
	}
	return v
}

// newestCount is the live view's count of the requests answered by version 2, the one the
// article's API serves.
const newestCount = `Number((document.querySelector('.requests-total[data-version="2"]') || {dataset: {}}).dataset.count ?? -1)`

func requestCount(t *testing.T, ctx context.Context) float64 {
	return eval[float64](t, ctx, newestCount)
}

// TestConsole opens the console on the admin listener of a real gateway: it classifies a
// photo (espresso), follows the live count while requests arrive, reads in both color
// schemes, reflows at 200 % zoom, works from the keyboard, and the page asks no other host for
// anything. TestConsoleTasks tries the other tasks.
func TestConsole(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the browser in -short mode")
	}
	coffee := shared(t, "images/skimage_coffee.png")
	coffeeBytes, err := os.ReadFile(coffee)
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "")
	ctx := browser(t)
	rec := record(t, ctx)
	timeout, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	ctx = timeout

	if err := chromedp.Do(ctx, chromedp.Navigate(g.admin+"/ui/")); err != nil {
		t.Fatal(err)
	}
	poll[bool](t, ctx, "the model in the picker", `document.querySelector('#model option[value="mobilenetv2-12-int8"]') !== null && document.getElementById('task').textContent === 'classification'`, 20*time.Second)
	if v := eval[[]string](t, ctx, `[...document.querySelectorAll('#version option')].map(o => o.textContent + (o.selected ? ' *' : ''))`); !slices.Equal(v, []string{"2 (newest) *", "1"}) {
		t.Errorf("the versions offered: %q", v)
	}

	var firstID string
	t.Run("try", func(t *testing.T) {
		if err := chromedp.Do(ctx, chromedp.SetUploadFiles(chromedp.ID("file0"), []string{coffee})); err != nil {
			t.Fatal(err)
		}
		got := poll[string](t, ctx, "the prediction", `(document.getElementById('prediction') || {}).textContent`, 30*time.Second)
		if got != "espresso" {
			t.Fatalf("the page says %q, want espresso", got)
		}
		top := eval[[]string](t, ctx, `[...document.querySelectorAll('.topk li .label')].map(e => e.textContent)`)
		if len(top) != 5 || top[0] != "espresso" {
			t.Errorf("top classes %q, want 5 starting with espresso", top)
		}
		stages := eval[[]string](t, ctx, `[...document.querySelectorAll('.wf-row .wf-name')].map(e => e.textContent)`)
		if strings.Join(stages, " ") != "read decode queue run answer" {
			t.Errorf("waterfall stages %q", stages)
		}
		firstID = eval[string](t, ctx, `document.getElementById('request-id').textContent`)
		var hdr map[string]string
		for u, h := range rec.snapshotHeaders() {
			if strings.Contains(u, "/models/mobilenetv2-12-int8/predict") {
				hdr = h
			}
		}
		if hdr == nil || hdr["x-request-id"] != firstID || !strings.Contains(hdr["server-timing"], "decode;dur=") {
			t.Errorf("the page shows request ID %q; the answer's headers: %v", firstID, hdr)
		}
		// The page's stage times are the header's.
		total := eval[string](t, ctx, `document.querySelector('.wf-total strong').textContent`)
		if !strings.HasSuffix(total, "ms") && !strings.HasSuffix(total, " s") {
			t.Errorf("server total %q", total)
		}
	})

	t.Run("live", func(t *testing.T) {
		// The live view counts the request just made.
		poll[bool](t, ctx, "the live count of the first request", newestCount+` >= 1`, 10*time.Second)
		before := requestCount(t, ctx)
		// Ten seconds of requests, 8 at a time: the charts fill, the batches form.
		loadCtx, stop := context.WithTimeout(ctx, 10*time.Second)
		defer stop()
		sent := make(chan int, 1)
		go func() {
			// Rounds of 16 requests until the time is up; the last round is answered (the
			// requests are not cancelled: a cancelled one counts as a 499).
			n := 0
			for loadCtx.Err() == nil {
				n += g.load(ctx, coffeeBytes, 16, 8)
			}
			sent <- n
		}()
		var seen []float64
		for loadCtx.Err() == nil {
			time.Sleep(700 * time.Millisecond)
			seen = append(seen, requestCount(t, ctx))
			if len(seen) == 10 {
				shot(t, ctx, *screenshot, false) // the batches forming
			}
		}
		n := <-sent
		rising := 0
		for i := 1; i < len(seen); i++ {
			if seen[i] > seen[i-1] {
				rising++
			}
		}
		if rising < 4 || seen[0] < before {
			t.Errorf("the count did not rise while requests were sent: %v before, then %v", before, seen)
		}
		// Every answered request is counted; requests cut by the load's deadline were
		// counted too, as 499s, so the count reaches at least the 200s.
		want := before + float64(n)
		got := poll[float64](t, ctx, "the count after the load", fmt.Sprintf(`(c => c >= %v && c)(%s)`, want, newestCount), 10*time.Second)
		t.Logf("live count %v -> %v with %d requests answered 200 (samples while sending: %v)", before, got, n, seen)
		if bars := eval[int](t, ctx, `document.querySelectorAll('.card .hist .bar:not(.empty)').length`); bars == 0 {
			t.Error("the batch size histogram shows no batch")
		}
		if cols := eval[int](t, ctx, `document.querySelectorAll('.card svg.chart rect.o-ok').length`); cols < 2 {
			t.Errorf("the requests chart has %d columns of served requests", cols)
		}
		rate := eval[string](t, ctx, `document.querySelector('.card .stat .big').textContent`)
		if rate == "–" {
			t.Error("no request rate shown")
		}
	})

	t.Run("older version", func(t *testing.T) {
		// Version 1 is not the one the article's API serves: the page asks the Open Inference
		// Protocol for every class's score and takes their softmax, as top_k does.
		newest := eval[[]string](t, ctx, `[...document.querySelectorAll('.topk li')].map(e => e.querySelector('.label').textContent + ' ' + e.querySelector('.num').textContent)`)
		eval[any](t, ctx, `(s => { s.value = '1'; s.dispatchEvent(new Event('change')); return null })(document.getElementById('version'))`)
		eval[any](t, ctx, `document.querySelector('#drop0 button.again').click(), null`)
		poll[bool](t, ctx, "version 1's answer", `(e => e && e.textContent === 'POST /v2/models/mobilenetv2-12-int8/versions/1/infer')(document.querySelector('.said code'))`, 30*time.Second)
		older := eval[[]string](t, ctx, `[...document.querySelectorAll('.topk li')].map(e => e.querySelector('.label').textContent + ' ' + e.querySelector('.num').textContent)`)
		if got := eval[string](t, ctx, `document.getElementById('prediction').textContent`); got != "espresso" || !slices.Equal(older, newest) {
			t.Errorf("version 1 (same model file) says %q, top %q; version 2 said %q", got, older, newest)
		}
		eval[any](t, ctx, `(s => { s.value = '2'; s.dispatchEvent(new Event('change')); return null })(document.getElementById('version'))`)
	})

	t.Run("schemes", func(t *testing.T) {
		const colors = `(s => s.backgroundColor + ' ' + s.color)(getComputedStyle(document.documentElement))`
		light := eval[string](t, ctx, colors)
		if _, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}}); err != nil {
			t.Fatal(err)
		}
		defer chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{})
		dark := eval[string](t, ctx, colors)
		if light == dark {
			t.Fatalf("the dark scheme looks as the light one: %s", dark)
		}
		bgL, fgL := luminances(t, light)
		bgD, fgD := luminances(t, dark)
		if !(bgL > 0.8 && fgL < 0.2 && bgD < 0.1 && fgD > 0.7) {
			t.Errorf("light %s (luminances %.2f/%.2f), dark %s (%.2f/%.2f)", light, bgL, fgL, dark, bgD, fgD)
		}
		shot(t, ctx, "", true)
	})

	t.Run("zoom200", func(t *testing.T) {
		// 200 % zoom of a 1280-pixel window: a 640-pixel layout at twice the pixels; and 400 %
		// (320 CSS pixels, WCAG's reflow width).
		for _, width := range []int64{640, 320} {
			if _, err := chromedp.Call(ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{Width: width, Height: 900, DeviceScaleFactor: float64(1280 / width)}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(1500 * time.Millisecond) // a live update at the new width
			widths := eval[[]float64](t, ctx, `[innerWidth, document.documentElement.scrollWidth]`)
			if widths[0] != float64(width) || widths[1] > widths[0] {
				t.Errorf("%d CSS pixels: the page is %v wide in a %v-pixel viewport: it scrolls sideways", width, widths[1], widths[0])
			}
			wide := eval[[]string](t, ctx, `[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > innerWidth + 1).map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right)).slice(0, 5)`)
			if len(wide) > 0 {
				t.Errorf("%d CSS pixels: elements past the right edge: %v", width, wide)
			}
		}
		if _, err := chromedp.Call(ctx, emulation.ClearDeviceMetricsOverride, struct{}{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("keyboard", func(t *testing.T) {
		eval[any](t, ctx, `document.activeElement && document.activeElement.blur(), window.scrollTo(0, 0), null`)
		var order []string
		for range 12 {
			if err := chromedp.Do(ctx, chromedp.KeyEvent(kb.Tab)); err != nil {
				t.Fatal(err)
			}
			id := eval[string](t, ctx, `(e => e.id || e.className || e.tagName)(document.activeElement)`)
			order = append(order, id)
			if id == "again" {
				break
			}
		}
		for _, want := range []string{"model", "version", "file0", "again"} {
			if !slices.Contains(order, want) {
				t.Fatalf("Tab did not reach %s: %v", want, order)
			}
		}
		if o := eval[string](t, ctx, `getComputedStyle(document.activeElement).outlineStyle`); o == "none" {
			t.Error("the focused button shows no outline")
		}
		// Enter on "Send again" sends the photo again: a new answer, a new request ID.
		firstID = eval[string](t, ctx, `document.getElementById('request-id').textContent`)
		if err := chromedp.Do(ctx, chromedp.KeyEvent(kb.Enter)); err != nil {
			t.Fatal(err)
		}
		id := poll[string](t, ctx, "a new answer", fmt.Sprintf(`(e => e && e.textContent !== %q && e.textContent)(document.getElementById('request-id'))`, firstID), 20*time.Second)
		if got := eval[string](t, ctx, `document.getElementById('prediction').textContent`); got != "espresso" || id == "" {
			t.Errorf("after Enter: %q, request ID %q", got, id)
		}
	})

	rec.check(t, g.admin)
}

func (r *recorder) snapshotHeaders() map[string]map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]map[string]string{}
	for k, v := range r.headers {
		out[k] = v
	}
	return out
}

// shot takes a full-page screenshot, checks that it shows the scheme asked for, and writes
// it to dst when one is given.
func shot(t *testing.T, ctx context.Context, dst string, dark bool) {
	t.Helper()
	eval[any](t, ctx, `window.scrollTo(0, 0), null`)
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(buf))
	if err != nil {
		t.Fatal(err)
	}
	// The page's margin, left of the sections: the scheme's background.
	r, g, b, _ := img.At(4, img.Bounds().Dy()/2).RGBA()
	lum := (0.2126*float64(r) + 0.7152*float64(g) + 0.0722*float64(b)) / 65535
	if dark != (lum < 0.3) {
		t.Errorf("the screenshot's background has luminance %.2f (dark scheme: %v)", lum, dark)
	}
	if dst == "" {
		return
	}
	// 256 colors (Plan 9's palette, dithered): a third of Chromium's PNG, for docs/.
	pal := image.NewPaletted(img.Bounds(), palette.Plan9)
	draw.FloydSteinberg.Draw(pal, img.Bounds(), img, image.Point{})
	var out bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&out, pal); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%dx%d, %d bytes)", dst, img.Bounds().Dx(), img.Bounds().Dy(), out.Len())
}

// luminances reads "rgb(r, g, b) rgb(r, g, b)" into two relative luminances.
func luminances(t *testing.T, s string) (float64, float64) {
	t.Helper()
	var c [6]float64
	if _, err := fmt.Sscanf(strings.ReplaceAll(s, ",", ""), "rgb(%f %f %f) rgb(%f %f %f)", &c[0], &c[1], &c[2], &c[3], &c[4], &c[5]); err != nil {
		t.Fatalf("colors %q: %v", s, err)
	}
	l := func(r, g, b float64) float64 { return (0.2126*r + 0.7152*g + 0.0722*b) / 255 }
	return l(c[0], c[1], c[2]), l(c[3], c[4], c[5])
}

// TestConsoleTasks tries the tasks other than classification on a real gateway serving the
// face detector and MobileNetV2's pooled features, versions 1 and 2 each: the page sends real
// photos (to the newest version through the article's API, to the other through the Open
// Inference Protocol) and what it shows (the boxes drawn and listed with their labels and
// scores; the vectors' dimensions, norms, ranges, first values and cosine similarity) is
// checked against the gateway's own /predict answers for the same photos, fetched here.
func TestConsoleTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the browser in -short mode")
	}
	g, embedding := startTaskGateway(t)
	ctx := browser(t)
	timeout, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	ctx = timeout
	t.Run("detection", func(t *testing.T) { tryDetection(t, ctx, g) })
	t.Run("embedding", func(t *testing.T) {
		if !embedding {
			t.Skip("skipping: no embedding model (cutting MobileNetV2 needs Debian's python3 with onnx)")
		}
		tryEmbedding(t, ctx, g)
	})
}

func newTab(t *testing.T, parent context.Context) context.Context {
	t.Helper()
	tab, cancel := chromedp.NewContext(parent)
	t.Cleanup(cancel)
	if err := chromedp.Do(tab); err != nil {
		t.Fatal(err)
	}
	return tab
}

// detection is one entry of /predict's detections.
type detection struct {
	Label string     `json:"label"`
	Score float64    `json:"score"`
	Box   [4]float64 `json:"box"`
}

// openTask opens the console in a new tab and picks model and version as a user does.
func openTask(t *testing.T, parent context.Context, g *gateway, model, task string) (context.Context, *recorder) {
	t.Helper()
	tab := newTab(t, parent)
	rec := record(t, tab)
	if err := chromedp.Do(tab, chromedp.Navigate(g.admin+"/ui/")); err != nil {
		t.Fatal(err)
	}
	poll[bool](t, tab, "the model in the picker", fmt.Sprintf(`document.querySelector('#model option[value=%q]') !== null`, model), 20*time.Second)
	pickVersion(t, tab, model, "2", task)
	if v := eval[[]string](t, tab, `[...document.querySelectorAll('#version option')].map(o => o.textContent + (o.selected ? ' *' : ''))`); !slices.Equal(v, []string{"2 (newest) *", "1"}) {
		t.Errorf("the versions offered: %q", v)
	}
	return tab, rec
}

// pickVersion chooses a model and version in the selects (their change events, as a user's
// choice fires) and waits for the page to name the version's task.
func pickVersion(t *testing.T, tab context.Context, model, version, task string) {
	t.Helper()
	eval[any](t, tab, fmt.Sprintf(`(() => {
		for (const [id, v] of [['model', %q], ['version', %q]]) {
			const s = document.getElementById(id);
			if (s.value !== v) { s.value = v; s.dispatchEvent(new Event('change')); }
		}
		return null })()`, model, version))
	poll[bool](t, tab, "the task "+task, fmt.Sprintf(`document.getElementById('version').value === %q && document.getElementById('task').textContent === %q`, version, task), 20*time.Second)
}

// upload chooses a photo in file input i and waits for the answer from endpoint: the page's
// status and its request ID.
func upload(t *testing.T, tab context.Context, i int, photo, endpoint, ready string) {
	t.Helper()
	if err := chromedp.Do(tab, chromedp.SetUploadFiles(chromedp.ID(fmt.Sprintf("file%d", i)), []string{photo})); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, tab, endpoint, ready)
}

// waitAnswer waits until the page shows an answer from endpoint and ready holds.
func waitAnswer(t *testing.T, tab context.Context, endpoint, ready string) {
	t.Helper()
	poll[bool](t, tab, "the answer of "+endpoint, fmt.Sprintf(`(e => e !== null && e.textContent === %q)(document.querySelector('#result .said code')) && %s`, "POST "+endpoint, ready), 30*time.Second)
	if st := eval[string](t, tab, `document.querySelector('#result .said .status').textContent`); st != "200" {
		t.Fatalf("%s answered %s: %s", endpoint, st, eval[string](t, tab, `document.getElementById('result').textContent`))
	}
	if id := eval[string](t, tab, `document.getElementById('request-id').textContent`); id == "" || id == "(none)" {
		t.Errorf("%s: request ID %q", endpoint, id)
	}
}

func tryDetection(t *testing.T, parent context.Context, g *gateway) {
	tab, rec := openTask(t, parent, g, "faces", "detection")
	// Two faces (the newest version, the article's API), then one (version 1, the Open
	// Inference Protocol's detections).
	for _, c := range []struct {
		photo, version, endpoint string
		faces                    int
	}{
		{"images/go_video-001.png", "2", "/models/faces/predict", 2},
		{"images/skimage_astronaut.png", "1", "/v2/models/faces/versions/1/infer", 1},
	} {
		photo := shared(t, c.photo)
		img, err := os.ReadFile(photo)
		if err != nil {
			t.Fatal(err)
		}
		var want struct{ Detections []detection }
		g.predictJSON(t, "faces", img, &want)
		if len(want.Detections) != c.faces {
			t.Fatalf("%s: the gateway finds %d faces, want %d: %+v", c.photo, len(want.Detections), c.faces, want.Detections)
		}
		pickVersion(t, tab, "faces", c.version, "detection")
		upload(t, tab, 0, photo, c.endpoint, fmt.Sprintf(`document.querySelectorAll('#drop0 svg.boxes g.det').length === %d && document.querySelectorAll('.dets li').length === %[1]d`, c.faces))
		checkDetections(t, tab, photo, want.Detections)
	}
	rec.check(t, g.admin)
}

// checkDetections compares the boxes the page draws and lists with the gateway's.
func checkDetections(t *testing.T, tab context.Context, photo string, want []detection) {
	t.Helper()
	name := filepath.Base(photo)
	w, h := imageSize(t, photo)
	if vb := eval[string](t, tab, `document.querySelector('#drop0 svg.boxes').getAttribute('viewBox')`); vb != fmt.Sprintf("0 0 %d %d", w, h) {
		t.Errorf("%s: the boxes' viewBox is %q: want the photo's own pixels, 0 0 %d %d", name, vb, w, h)
	}
	drawn := eval[[]struct {
		Rect  []float64 `json:"rect"`
		Label string    `json:"label"`
	}](t, tab, `[...document.querySelectorAll('#drop0 svg.boxes g.det')].map(g => ({
		rect: ['x', 'y', 'width', 'height'].map(a => Number(g.querySelector('rect:not(.tag)').getAttribute(a))),
		label: g.querySelector('text').textContent}))`)
	listed := eval[[][]string](t, tab, `[...document.querySelectorAll('.dets li')].map(li => ['.label', '.num', '.box'].map(s => li.querySelector(s).textContent))`)
	if len(drawn) != len(want) || len(listed) != len(want) {
		t.Fatalf("%s: %d boxes drawn, %d listed; the gateway found %d", name, len(drawn), len(listed), len(want))
	}
	for i, d := range want {
		rect := []float64{d.Box[0], d.Box[1], d.Box[2] - d.Box[0], d.Box[3] - d.Box[1]}
		for k := range rect {
			if math.Abs(drawn[i].Rect[k]-rect[k]) > 1e-3 {
				t.Errorf("%s: box %d drawn at x, y, width, height %v; the gateway's box %v", name, i, drawn[i].Rect, d.Box)
				break
			}
		}
		if l := fmt.Sprintf("%s %d%%", d.Label, int(math.Round(d.Score*100))); drawn[i].Label != l {
			t.Errorf("%s: box %d labelled %q, want %q", name, i, drawn[i].Label, l)
		}
		if listed[i][0] != d.Label || !near(strings.TrimSuffix(listed[i][1], " %"), d.Score*100) {
			t.Errorf("%s: detection %d listed as %q; the gateway's: %s %v", name, i, listed[i], d.Label, d.Score)
		}
		box := strings.Split(strings.Trim(listed[i][2], "[]"), ", ")
		for k := range box {
			if len(box) != 4 || !near(box[k], d.Box[k]) {
				t.Errorf("%s: detection %d's box listed as %s; the gateway's %v", name, i, listed[i][2], d.Box)
				break
			}
		}
	}
}

// near says whether a number the page shows, rounded to the digits it shows ("0.0126",
// "25.3", "1,280"), is v.
func near(shown string, v float64) bool {
	s := strings.ReplaceAll(strings.TrimSpace(shown), ",", "")
	x, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return false
	}
	if strings.ContainsAny(s, "eE") { // toPrecision(2) of a tiny value
		return math.Abs(x-v) <= 0.051*math.Abs(v)
	}
	decimals := 0
	if i := strings.IndexByte(s, '.'); i >= 0 {
		decimals = len(s) - i - 1
	}
	// Half a unit of the last digit shown, and a little for float32 values read as doubles.
	return math.Abs(x-v) <= 0.5*math.Pow10(-decimals)+1e-6*math.Max(1, math.Abs(v))
}

func tryEmbedding(t *testing.T, parent context.Context, g *gateway) {
	tab, rec := openTask(t, parent, g, "features", "embedding")
	if eval[bool](t, tab, `document.getElementById('drop1').hidden`) {
		t.Fatal("no second photo to compare for an embedding model")
	}
	var vecs [2][]float64
	photos := [2]string{shared(t, "images/skimage_astronaut.png"), shared(t, "images/opencv_messi5.jpg")}
	for i, p := range photos {
		img, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var v struct{ Embedding []float64 }
		g.predictJSON(t, "features", img, &v)
		if len(v.Embedding) != 1280 {
			t.Fatalf("%s: a vector of %d", p, len(v.Embedding))
		}
		vecs[i] = v.Embedding
	}
	dims := `[...document.querySelectorAll('.emb .dim')].map(e => e.textContent).join(' ')`
	upload(t, tab, 0, photos[0], "/models/features/predict", dims+` === '1280'`)
	checkEmbedding(t, tab, 0, vecs[0])
	upload(t, tab, 1, photos[1], "/models/features/predict", dims+` === '1280 1280' && document.getElementById('cosine') !== null`)
	checkEmbedding(t, tab, 1, vecs[1])
	checkCosine(t, tab, vecs)

	// Photo A again, to version 1: the Open Inference Protocol's vector is the same.
	pickVersion(t, tab, "features", "1", "embedding")
	eval[any](t, tab, `document.querySelector('#drop0 button.again').click(), null`)
	waitAnswer(t, tab, "/v2/models/features/versions/1/infer", dims+` === '1280 1280' && document.getElementById('cosine') !== null`)
	checkEmbedding(t, tab, 0, vecs[0])
	checkCosine(t, tab, vecs)
	rec.check(t, g.admin)
}

// checkEmbedding compares photo i's summary on the page (dimensions, L2 norm, min / mean /
// max, first values) with the gateway's vector.
func checkEmbedding(t *testing.T, tab context.Context, i int, v []float64) {
	t.Helper()
	shown := eval[map[string]string](t, tab, fmt.Sprintf(`Object.fromEntries([...document.querySelectorAll('.emb')[%d].querySelectorAll('dt')].map(dt => [dt.textContent, dt.nextElementSibling.textContent]))`, i))
	var norm, sum float64
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range v {
		norm, sum, lo, hi = norm+x*x, sum+x, min(lo, x), max(hi, x)
	}
	norm = math.Sqrt(norm)
	ok := shown["dimensions"] == strconv.Itoa(len(v)) && near(shown["L2 norm"], norm)
	mmm := strings.Split(shown["min / mean / max"], " / ")
	ok = ok && len(mmm) == 3 && near(mmm[0], lo) && near(mmm[1], sum/float64(len(v))) && near(mmm[2], hi)
	first := strings.Split(strings.TrimSuffix(shown["first values"], ", …"), ", ")
	ok = ok && len(first) == 6
	for k := range first {
		ok = ok && near(first[k], v[k])
	}
	if !ok {
		t.Errorf("photo %d: the page shows %q; the gateway's vector: %d values, norm %v, min %v, mean %v, max %v, first %v",
			i, shown, len(v), norm, lo, sum/float64(len(v)), hi, v[:6])
	}
}

func checkCosine(t *testing.T, tab context.Context, v [2][]float64) {
	t.Helper()
	var dot, na, nb float64
	for i := range v[0] {
		dot, na, nb = dot+v[0][i]*v[1][i], na+v[0][i]*v[0][i], nb+v[1][i]*v[1][i]
	}
	want := dot / math.Sqrt(na*nb)
	got := eval[string](t, tab, `document.getElementById('cosine').textContent`)
	if !near(got, want) || len(got) != len("0.0000") {
		t.Errorf("cosine similarity %s, want %.4f (%v)", got, want, want)
	}
}

func imageSize(t *testing.T, path string) (int, int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, _, err := image.DecodeConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	return c.Width, c.Height
}

// TestConsoleRepository opens the console on the public listener (server.console: public)
// of a gateway with an admin token: loading and unloading are offered once the page is given
// the token the gateway accepts, and they unload and load the model.
func TestConsoleRepository(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the browser in -short mode")
	}
	const token = "s3cr3t-admin-token-0123456789"
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "server: {console: public, admin_token_file: "+tokFile+"}\n")
	ctx := browser(t)
	rec := record(t, ctx)
	timeout, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ctx = timeout
	if err := chromedp.Do(ctx, chromedp.Navigate(g.public+"/ui/")); err != nil {
		t.Fatal(err)
	}
	poll[bool](t, ctx, "the model's entry", `document.querySelectorAll('#models .entry').length === 1 && document.querySelectorAll('.card').length === 2`, 20*time.Second)
	if hidden := eval[bool](t, ctx, `document.querySelector('#models .actions').hidden`); !hidden {
		t.Error("load and unload are offered without the token")
	}
	if note := eval[string](t, ctx, `document.getElementById('repo-note').textContent`); !strings.Contains(note, "admin token") {
		t.Errorf("the page says %q", note)
	}
	useToken := func(tok string) {
		eval[any](t, ctx, fmt.Sprintf(`(() => { document.getElementById('token-box').open = true; document.getElementById('token').value = %q; document.getElementById('token-form').requestSubmit(); return null })()`, tok))
	}
	useToken("wrong-token-0123456789")
	poll[bool](t, ctx, "the wrong token refused", `document.getElementById('token-state').textContent === 'the gateway does not accept this token'`, 10*time.Second)
	useToken(token)
	poll[bool](t, ctx, "the token accepted", `document.getElementById('token-state').textContent === 'token accepted' && !document.querySelector('#models .actions').hidden`, 10*time.Second)

	unload := `document.querySelector('#models .actions button.danger')`
	eval[any](t, ctx, unload+`.click(), null`)
	if label := eval[string](t, ctx, unload+`.textContent`); label != "Confirm unload" {
		t.Fatalf("the first click on Unload: %q, want a confirmation", label)
	}
	eval[any](t, ctx, unload+`.click(), null`)
	poll[bool](t, ctx, "the model unloaded", `document.getElementById('action-status').textContent === 'mobilenetv2-12-int8: unloaded' && [...document.querySelectorAll('#models .versions .state')].every(e => e.textContent === 'UNAVAILABLE') && document.querySelectorAll('.card').length === 0`, 30*time.Second)
	if reasons := eval[string](t, ctx, `document.querySelector('#models .versions').textContent`); !strings.Contains(reasons, "unloaded") {
		t.Errorf("with the token, the page tells why: %q", reasons)
	}
	poll[bool](t, ctx, "Try it without a model", `document.getElementById('model').disabled`, 10*time.Second)
	eval[any](t, ctx, `document.querySelector('#models .actions button:not(.danger)').click(), null`)
	poll[bool](t, ctx, "the model loaded", `document.getElementById('action-status').textContent === 'mobilenetv2-12-int8: loaded' && document.querySelectorAll('.card').length === 2 && !document.getElementById('model').disabled`, 60*time.Second)
	rec.check(t, g.public)
}

// TestNear: a number shown rounded matches the value it rounds, and no other.
func TestNear(t *testing.T) {
	for _, c := range []struct {
		shown string
		v     float64
		want  bool
	}{
		{"25.3", 25.34, true}, {"25.3", 25.36, false}, {"0.0126", 0.01264, true}, {"0.0126", 0.0127, false},
		{"1,280", 1280, true}, {"100", 99.9997, true}, {"99.9", 99.96, false}, {"2.4e-5", 2.41e-5, true},
		{"2.4e-5", 3e-5, false}, {"-0.750", -0.7504, true}, {"[53", 53, false}, {"", 0, false},
	} {
		if got := near(c.shown, c.v); got != c.want {
			t.Errorf("near(%q, %v) = %v", c.shown, c.v, got)
		}
	}
}
