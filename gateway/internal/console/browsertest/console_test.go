// Package browsertest drives the gateway's console (gateway/internal/console) in headless
// Chromium against a real bin/gateway serving the pretrained MobileNetV2 of ../shared. It
// is a module of its own so that the browser driver (chromedp) stays out of the server's
// go.mod; `make console-test` runs it (and `make test`).
package browsertest

import (
	"bytes"
	"context"
	"encoding/json"
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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
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
// schemes, reflows at 200 % zoom, works from the keyboard, renders detections and embeddings
// from canned answers (the server's tasks other than classification), and the page asks no
// other host for anything.
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

	t.Run("detection", func(t *testing.T) { cannedDetection(t, ctx, g, coffee) })
	t.Run("embedding", func(t *testing.T) { cannedEmbedding(t, ctx, g, coffee) })

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

// intercept answers a tab's requests whose URL ends with one of answers' keys with the
// canned value (JSON) in place of the gateway: the page renders the server's other tasks
// before the server can produce them. Each answer is a func, called per request.
func intercept(t *testing.T, ctx context.Context, answers map[string]func() any) {
	t.Helper()
	// Listen's func runs in the tab's read loop: it hands the event to a goroutine that
	// answers it.
	paused := make(chan *fetch.EventRequestPaused, 16)
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok {
			paused <- e
		}
	}); err != nil {
		t.Fatal(err)
	}
	var patterns []*fetch.RequestPattern
	for suffix := range answers {
		patterns = append(patterns, &fetch.RequestPattern{URLPattern: "*" + suffix + "*"})
	}
	go func() {
		for {
			var ev *fetch.EventRequestPaused
			select {
			case ev = <-paused:
			case <-ctx.Done():
				return
			}
			u, _ := url.Parse(ev.Request.URL)
			var body []byte
			for suffix, f := range answers {
				if strings.HasSuffix(u.Path, suffix) {
					body, _ = json.Marshal(f())
				}
			}
			_, err := chromedp.Call(ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{
				RequestID: ev.RequestID, ResponseCode: 200, Body: body,
				ResponseHeaders: []*fetch.HeaderEntry{
					{Name: "Content-Type", Value: "application/json"},
					{Name: "X-Request-ID", Value: "canned-" + string(ev.RequestID)},
					{Name: "Server-Timing", Value: "read;dur=0.5, decode;dur=4.25, queue;dur=1, run;dur=3, total;dur=10"},
				}})
			if err != nil && ctx.Err() == nil {
				t.Errorf("cannot answer %s: %v", ev.Request.URL, err)
			}
		}
	}()
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: patterns}); err != nil {
		t.Fatal(err)
	}
}

// taskConfig is a model configuration that says its task, as the gateway's will.
func taskConfig(task string) func() any {
	return func() any {
		return map[string]any{"name": "mobilenetv2-12-int8", "max_batch_size": 8,
			"parameters": map[string]any{"task": map[string]string{"string_value": task + " (model)"}}}
	}
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

func cannedDetection(t *testing.T, parent context.Context, g *gateway, photo string) {
	tab := newTab(t, parent)
	rec := record(t, tab)
	dets := []map[string]any{
		{"label": "cup", "score": 0.97, "box": []float64{52.5, 140, 300, 355.25}},
		{"label": "spoon", "score": 0.61, "box": []float64{10, 20, 60, 90}},
	}
	intercept(t, tab, map[string]func() any{
		"/config":  taskConfig("detect"),
		"/predict": func() any { return map[string]any{"detections": dets} },
	})
	if err := chromedp.Do(tab, chromedp.Navigate(g.admin+"/ui/")); err != nil {
		t.Fatal(err)
	}
	poll[bool](t, tab, "the detection task", `document.getElementById('task').textContent === 'detection'`, 20*time.Second)
	if err := chromedp.Do(tab, chromedp.SetUploadFiles(chromedp.ID("file0"), []string{photo})); err != nil {
		t.Fatal(err)
	}
	poll[bool](t, tab, "the boxes", `document.querySelectorAll('#drop0 svg.boxes g.det').length === 2`, 20*time.Second)
	w, h := imageSize(t, photo)
	if vb := eval[string](t, tab, `document.querySelector('#drop0 svg.boxes').getAttribute('viewBox')`); vb != fmt.Sprintf("0 0 %d %d", w, h) {
		t.Errorf("the boxes' viewBox is %q: want the photo's own pixels, 0 0 %d %d", vb, w, h)
	}
	rect := eval[[]string](t, tab, `['x', 'y', 'width', 'height'].map(a => document.querySelector('#drop0 svg.boxes g.det rect').getAttribute(a))`)
	if strings.Join(rect, " ") != "52.5 140 247.5 215.25" {
		t.Errorf("the first box is drawn at %v, want x 52.5 y 140 width 247.5 height 215.25", rect)
	}
	labels := eval[[]string](t, tab, `[...document.querySelectorAll('#drop0 svg.boxes text')].map(e => e.textContent)`)
	if len(labels) != 2 || labels[0] != "cup 97%" || labels[1] != "spoon 61%" {
		t.Errorf("box labels %q", labels)
	}
	list := eval[string](t, tab, `document.querySelector('.dets').textContent`)
	if !strings.Contains(list, "cup") || !strings.Contains(list, "97.0 %") || !strings.Contains(list, "[53, 140, 300, 355]") {
		t.Errorf("the detections' list reads %q", list)
	}
	if id := eval[string](t, tab, `document.getElementById('request-id').textContent`); !strings.HasPrefix(id, "canned-") {
		t.Errorf("request ID %q, want the canned answer's", id)
	}
	rec.check(t, g.admin)
}

func cannedEmbedding(t *testing.T, parent context.Context, g *gateway, photo string) {
	tab := newTab(t, parent)
	rec := record(t, tab)
	a := []float64{0.5, -1.25, 3, 0, 2.5, 0.125, -0.75, 1}
	b := []float64{0.25, -1, 2.5, 0.5, 2, -0.5, -0.5, 1.5}
	var mu sync.Mutex
	calls := 0
	intercept(t, tab, map[string]func() any{
		"/config": taskConfig("embed"),
		"/predict": func() any {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls == 1 {
				return map[string]any{"embedding": a}
			}
			return map[string]any{"embedding": b}
		},
	})
	if err := chromedp.Do(tab, chromedp.Navigate(g.admin+"/ui/")); err != nil {
		t.Fatal(err)
	}
	poll[bool](t, tab, "the embedding task", `document.getElementById('task').textContent === 'embedding' && !document.getElementById('drop1').hidden`, 20*time.Second)
	if err := chromedp.Do(tab, chromedp.SetUploadFiles(chromedp.ID("file0"), []string{photo})); err != nil {
		t.Fatal(err)
	}
	poll[bool](t, tab, "the first vector", `(e => e && e.textContent === '8')(document.querySelector('.emb .dim'))`, 20*time.Second)
	if err := chromedp.Do(tab, chromedp.SetUploadFiles(chromedp.ID("file1"), []string{photo})); err != nil {
		t.Fatal(err)
	}
	got := poll[string](t, tab, "the cosine similarity", `(e => e && e.textContent)(document.getElementById('cosine'))`, 20*time.Second)
	var dot, na, nb float64
	for i := range a {
		dot, na, nb = dot+a[i]*b[i], na+a[i]*a[i], nb+b[i]*b[i]
	}
	if want := fmt.Sprintf("%.4f", dot/math.Sqrt(na*nb)); got != want {
		t.Errorf("cosine similarity %s, want %s", got, want)
	}
	rec.check(t, g.admin)
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
