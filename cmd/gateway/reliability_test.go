package main_test

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/imagegate/imagegate/loadtest"
)

// The reliability suite: each failure mode of a gateway under load and hostile clients, run
// against the real binary on the shipped configuration. In `make test` every scenario runs in
// its short form (a few seconds each) and checks what must always hold; `make reliability`
// runs the long form (-reliability.long), checks the targets and writes docs/reliability.md
// (-reliability.report).

var (
	longForm   = flag.Bool("reliability.long", false, "run the reliability scenarios in their long form and check their targets")
	reportPath = flag.String("reliability.report", "", "write the scenarios' tables (Markdown) to this file")
	overrides  = flag.String("reliability.set", "", "configuration overrides for the load scenarios, key=value[,key=value] (server.queue_discipline=lifo): to compare settings")
)

// loadOverrides parses -reliability.set.
func loadOverrides(t *testing.T) map[string]any {
	o := map[string]any{}
	for kv := range strings.SplitSeq(*overrides, ",") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("-reliability.set: %q is not key=value", kv)
		}
		o[k] = v
	}
	return o
}

// report collects one Markdown table per scenario.
var report struct {
	mu       sync.Mutex
	sections map[string]string
}

func addReport(name, markdown string) {
	report.mu.Lock()
	defer report.mu.Unlock()
	if report.sections == nil {
		report.sections = map[string]string{}
	}
	report.sections[name] = markdown
}

func TestMain(m *testing.M) {
	flag.Parse()
	// The gateways started here keep their model cache (runtime.cache_dir: auto) in a folder
	// of this run's, not in the user's.
	cache, err := os.MkdirTemp("", "imagegate-test-cache")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_CACHE_HOME", cache)
	code := m.Run()
	os.RemoveAll(cache)
	if *reportPath != "" && len(report.sections) > 0 {
		var b strings.Builder
		b.WriteString("# Reliability under load and hostile clients\n\n")
		b.WriteString("Written by `make reliability` (`go test ./cmd/gateway -run Reliability -reliability.long`), ")
		b.WriteString("against `bin/gateway` on the shipped configuration (`configs/gateway.yaml`) unless a scenario names ")
		b.WriteString("an override, on this machine (" + cpuModel() + ", " + strconv.Itoa(numCPU()) + " CPUs), with the ")
		b.WriteString("clients in the same process as the test. `make test` runs the same scenarios in a short form.\n\n")
		names := make([]string, 0, len(report.sections))
		for n := range report.sections {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			b.WriteString(report.sections[n])
			b.WriteString("\n")
		}
		if err := os.WriteFile(*reportPath, []byte(b.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "cannot write the reliability report:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "unknown CPU"
}

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

// pick returns the short or the long form of a scenario parameter.
func pick[T any](short, long T) T {
	if *longForm {
		return long
	}
	return short
}

// skipRaceServer skips a scenario whose figures (memory, throughput) mean nothing for a
// race-instrumented server (make test runs the integration tests against one too).
func skipRaceServer(t *testing.T) {
	if os.Getenv("GATEWAY_RACE") != "" {
		t.Skip("the reliability scenarios measure memory and throughput; GATEWAY_RACE says the server is race-instrumented")
	}
}

// shippedConfig is configs/gateway.yaml with its paths made absolute and the given overrides
// applied ("server.max_connections" = 100, "batching.default_timeout" = "200ms" for every
// model).
func shippedConfig(t *testing.T, overrides map[string]any) string {
	t.Helper()
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "configs", "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	models := doc["models"].([]any)
	for _, mm := range models {
		m := mm.(map[string]any)
		for _, k := range []string{"path", "labels"} {
			if p, ok := m[k].(string); ok && !filepath.IsAbs(p) {
				m[k] = filepath.Join(root, "configs", p)
			}
		}
	}
	for k, v := range overrides {
		section, key, _ := strings.Cut(k, ".")
		switch section {
		case "server":
			s, _ := doc["server"].(map[string]any)
			if s == nil {
				s = map[string]any{}
				doc["server"] = s
			}
			s[key] = v
		default: // a model section: batching, preprocess, runtime...
			for _, mm := range models {
				m := mm.(map[string]any)
				sub, _ := m[section].(map[string]any)
				if sub == nil {
					sub = map[string]any{}
					m[section] = sub
				}
				sub[key] = v
			}
		}
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// rss reads a process's resident set size and its peak (VmHWM), in bytes.
func rss(pid int) (cur, peak int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			cur = v << 10
		case "VmHWM:":
			peak = v << 10
		}
	}
	return cur, peak
}

// resetPeakRSS makes VmHWM start again from the current RSS (Linux: clear_refs 5).
func resetPeakRSS(pid int) {
	os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0o200)
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// prober checks health, metrics and (optionally) a normal prediction every interval while a
// scenario runs, recording the worst latency and every failure.
type prober struct {
	g                    *gateway
	predict              []byte
	stop                 chan struct{}
	done                 chan struct{}
	mu                   sync.Mutex
	checks, fails, ok    int
	predicts, predictsOK int
	worst                time.Duration
	firstFail            string
}

func startProber(g *gateway, predict []byte, every time.Duration) *prober {
	p := &prober{g: g, predict: predict, stop: make(chan struct{}), done: make(chan struct{})}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) (int, time.Duration) {
		t := time.Now()
		resp, err := client.Get(g.url + path)
		if err != nil {
			return -1, time.Since(t)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, time.Since(t)
	}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			for _, path := range []string{"/v2/health/live", "/v2/health/ready", "/metrics"} {
				code, d := get(path)
				p.mu.Lock()
				p.checks++
				p.worst = max(p.worst, d)
				if code == 200 {
					p.ok++
				} else {
					p.fails++
					if p.firstFail == "" {
						p.firstFail = fmt.Sprintf("%s: %d after %v", path, code, d)
					}
				}
				p.mu.Unlock()
			}
			if p.predict != nil {
				resp, err := client.Post(g.url+"/predict/", "image/jpeg", bytes.NewReader(p.predict))
				p.mu.Lock()
				p.predicts++
				if err == nil && resp.StatusCode == 200 {
					p.predictsOK++
				}
				p.mu.Unlock()
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}
	}()
	return p
}

func (p *prober) finish() {
	close(p.stop)
	<-p.done
}

func rocket(t *testing.T) []byte {
	b, err := os.ReadFile(filepath.Join(sharedDir(t), "images", "skimage_rocket.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReliabilitySlowBodies: connections declare a 16 MB body, send ~120 bytes and wait.
// Memory must follow the bytes received, not the bytes declared; the server keeps serving.
func TestReliabilitySlowBodies(t *testing.T) {
	skipRaceServer(t)
	img := rocket(t)
	g := startGateway(t, shippedConfig(t, nil))
	pid := g.cmd.Process.Pid
	n, hold := pick(120, 250), pick(3*time.Second, 20*time.Second)
	before, _ := rss(pid)
	resetPeakRSS(pid)
	p := startProber(g, img, 250*time.Millisecond)
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /predict/ HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\nContent-Length: 16000000\r\n\r\n%s", strings.Repeat("x", 120))
	}
	time.Sleep(hold)
	_, peak := rss(pid)
	p.finish()
	for _, c := range conns {
		c.Close()
	}
	t.Logf("%d slow bodies held %v: RSS %s before, peak %s; health %d/%d, predictions %d/%d, worst probe %v",
		n, hold, mib(before), mib(peak), p.ok, p.checks, p.predictsOK, p.predicts, p.worst)
	addReport("1 slow bodies", fmt.Sprintf("## Slow-body attack\n\n%d connections each declare `Content-Length: 16000000`, send 120 bytes and wait.\n\n"+
		"| connections | held | RSS before | RSS peak | health checks OK | predictions OK (meanwhile) | worst probe |\n|---|---|---|---|---|---|---|\n"+
		"| %d | %v | %s | %s | %d/%d | %d/%d | %v |\n", n, n, hold, mib(before), mib(peak), p.ok, p.checks, p.predictsOK, p.predicts, p.worst.Round(time.Millisecond)))
	if peak > 300<<20 {
		t.Errorf("RSS peaked at %s while %d connections declared 16 MB bodies (target < 300 MiB)", mib(peak), n)
	}
	if p.fails > 0 || p.predictsOK < p.predicts {
		t.Errorf("the server stopped serving: %d health failures (%s), %d/%d predictions", p.fails, p.firstFail, p.predictsOK, p.predicts)
	}
}

// pngBomb is a PNG whose header declares w x h RGBA 16-bit and whose pixel data (all zero)
// compresses to a few hundred kilobytes.
func pngBomb(t *testing.T, w, h int) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, data []byte) {
		binary.Write(&b, binary.BigEndian, uint32(len(data)))
		crc := crc32.NewIEEE()
		crc.Write([]byte(typ))
		crc.Write(data)
		b.WriteString(typ)
		b.Write(data)
		binary.Write(&b, binary.BigEndian, crc.Sum32())
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = 16, 6 // 16-bit RGBA
	chunk("IHDR", ihdr)
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestCompression)
	row := make([]byte, 1+w*8)
	for range h {
		zw.Write(row)
	}
	zw.Close()
	chunk("IDAT", z.Bytes())
	chunk("IEND", nil)
	return b.Bytes()
}

var (
	bombOnce sync.Once
	bomb     []byte
)

// TestReliabilityPNGBombs: clients loop a 7000x7000 RGBA 16-bit PNG (under max_pixels) while a
// normal client keeps predicting. Memory stays bounded and the normal client keeps at least
// half its throughput.
func TestReliabilityPNGBombs(t *testing.T) {
	skipRaceServer(t)
	img := rocket(t)
	bombOnce.Do(func() { bomb = pngBomb(t, 7000, 7000) })
	g := startGateway(t, shippedConfig(t, nil))
	pid := g.cmd.Process.Pid
	k, dur := pick(8, 8), pick(6*time.Second, 30*time.Second)
	normal := func(d time.Duration) (n int) {
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			if a := g.do("POST", "/predict/", "image/jpeg", img); a.status == 200 {
				n++
			} else {
				t.Errorf("normal client: %d %s", a.status, a.body)
				return
			}
		}
		return n
	}
	alone := float64(normal(dur/3)) / (dur / 3).Seconds()
	resetPeakRSS(pid)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var bombOK, bombRefused, bombOther atomic.Int64
	for range k {
		wg.Go(func() {
			for !stop.Load() {
				a := g.do("POST", "/predict/", "image/png", bomb)
				switch {
				case a.status == 200:
					bombOK.Add(1)
				case a.status == 503 || a.status == 413:
					bombRefused.Add(1)
					time.Sleep(50 * time.Millisecond)
				default:
					bombOther.Add(1)
					t.Errorf("bomb: %d %.200s", a.status, a.body)
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	under := float64(normal(dur)) / dur.Seconds()
	stop.Store(true)
	wg.Wait()
	_, peak := rss(pid)
	time.Sleep(pick(time.Second, 5*time.Second))
	after, _ := rss(pid)
	ratio := under / alone
	t.Logf("%d bomb clients: normal client %.1f req/s alone, %.1f with bombs (%.2f); bombs %d decoded, %d refused; RSS peak %s, %s after",
		k, alone, under, ratio, bombOK.Load(), bombRefused.Load(), mib(peak), mib(after))
	addReport("2 png bombs", fmt.Sprintf("## PNG bomb burst\n\n%d clients loop a %d-byte PNG declaring 7000x7000 RGBA 16-bit (49 Mpixel, under max_pixels) "+
		"while one normal client predicts the rocket JPEG in a loop.\n\n"+
		"| bomb clients | duration | normal client alone | with bombs | ratio | bombs decoded | bombs refused | RSS peak | RSS after |\n|---|---|---|---|---|---|---|---|---|\n"+
		"| %d | %v | %.1f req/s | %.1f req/s | %.2f | %d | %d | %s | %s |\n",
		k, len(bomb), k, dur, alone, under, ratio, bombOK.Load(), bombRefused.Load(), mib(peak), mib(after)))
	if peak > 600<<20 {
		t.Errorf("RSS peaked at %s with %d PNG bombs in flight (target < 600 MiB)", mib(peak), k)
	}
	if min := pick(0.25, 0.5); ratio < min {
		t.Errorf("the normal client kept %.2f of its throughput under the bombs (want >= %.2f)", ratio, min)
	}
}

// procCPU is the user plus system CPU time a process has used so far (/proc/PID/stat; the
// kernel's receive work done in softirq context is charged to whichever process it
// interrupted, which on loopback is mostly the sender).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s) // f[0] is field 3 (state): utime is field 14, stime 15
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * time.Second / 100 // USER_HZ is 100 on Linux
}

// overload drives an open loop at factor x the capacity measured at c=50, with the given
// request timeout (0: the configured default), and checks and reports the figures: goodput,
// good answers per gateway CPU-second against those at capacity, the served and refusal
// latencies, and the gateway CPU a refusal costs.
func overload(t *testing.T, name string, factor float64, timeoutMS int, expect bool) {
	overloadOver(t, name, factor, timeoutMS, expect, false)
}

// overloadOver runs the overload scenario over HTTP's /predict/ or, with grpc, over gRPC's
// ModelInfer (the same image; capacity measured over gRPC too; a deadline as grpc-timeout).
func overloadOver(t *testing.T, name string, factor float64, timeoutMS int, expect, grpc bool) {
	skipRaceServer(t)
	shared := sharedDir(t)
	article, err := os.ReadFile(filepath.Join(shared, "seed", "rime_5868.json"))
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, shippedConfig(t, loadOverrides(t)))
	pid := g.cmd.Process.Pid
	body := []loadtest.Body{{Name: "rime_5868.json", Data: article}}
	capHdr := []loadtest.Header{{Name: "Content-Type", Value: "application/json"}}
	hdr := capHdr
	if timeoutMS > 0 {
		hdr = append(hdr[:1:1], loadtest.Header{Name: "X-Request-Timeout", Value: strconv.Itoa(timeoutMS)})
	}
	// Capacity is measured before and after the overload, and goodput is compared with their
	// mean: on a shared machine one 10 s measurement moved by 10-20 % between scenarios run a
	// minute apart (259 and 279 req/s), and the machine's speed during the overload lies
	// between the two better than either alone.
	// config is a run's configuration over the scenario's protocol.
	config := func(c loadtest.Config) loadtest.Config {
		c.URL, c.Bodies = g.url+"/predict/", body
		if !grpc {
			return c
		}
		g.mu.Lock()
		c.URL, c.Headers = g.grpc, nil
		g.mu.Unlock()
		if timeoutMS > 0 && c.Rate > 0 {
			c.Timeout = time.Duration(timeoutMS) * time.Millisecond // the call's deadline
		}
		c.GRPCConns = 4
		if err := loadtest.PrepareGRPC(t.Context(), &c, shippedModel(t)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	type capRun struct {
		rate, perCPU, p50, p99 float64
		refused                uint64
	}
	measureCapacity := func() capRun {
		warm, err := loadtest.Run(t.Context(), config(loadtest.Config{Headers: capHdr,
			Concurrency: 50, Duration: time.Second, KeepAlive: true}))
		if err != nil || warm.Summary.OK2xx == 0 {
			t.Fatalf("warm-up: %v %+v", err, warm.Summary)
		}
		cpu0 := procCPU(pid)
		res, err := loadtest.Run(t.Context(), config(loadtest.Config{Headers: capHdr,
			Concurrency: 50, Duration: pick(3*time.Second, 10*time.Second), KeepAlive: true}))
		if err != nil {
			t.Fatal(err)
		}
		cpu := procCPU(pid) - cpu0
		s := res.Summary
		if s.Throughput <= 0 || cpu <= 0 {
			t.Fatalf("capacity run: %+v (gateway CPU %v)", s, cpu)
		}
		return capRun{s.Throughput, float64(s.OK2xx) / cpu.Seconds(), s.SuccessLatency.P50, s.SuccessLatency.P99, s.Refused}
	}
	before := measureCapacity()
	// With a deadline, goodput is compared with what the same client (an open loop with that
	// deadline) reaches at 1x: a closed loop of 50 with a 200 ms deadline keeps a queue that
	// sheds most of its own requests, and tells nothing of the capacity.
	var ref float64
	if timeoutMS > 0 && *longForm {
		res, err := loadtest.Run(t.Context(), config(loadtest.Config{Headers: hdr,
			Rate: before.rate, Concurrency: 4000, Duration: 15 * time.Second, KeepAlive: true, Arrival: loadtest.ArrivalPoisson}))
		if err != nil {
			t.Fatal(err)
		}
		ref = res.Summary.Throughput
	}
	resetPeakRSS(pid)
	p := startProber(g, nil, 250*time.Millisecond)
	dur := pick(8*time.Second, 30*time.Second)
	door0, expired0 := g.histogram("gateway_refusal_duration_seconds"), g.metric("gateway_decode_expired_total", "")
	cpu0 := procCPU(pid)
	res, err := loadtest.Run(t.Context(), config(loadtest.Config{Headers: hdr,
		Rate: factor * before.rate, Concurrency: 4000, Duration: dur, KeepAlive: true, Arrival: loadtest.ArrivalPoisson, ExpectContinue: expect}))
	if err != nil {
		t.Fatal(err)
	}
	cpu := procCPU(pid) - cpu0
	p.finish()
	_, peak := rss(pid)
	doorP99 := quantile(g.histogram("gateway_refusal_duration_seconds"), door0, 0.99) * 1000
	expiredServer := g.metric("gateway_decode_expired_total", "") - expired0
	after := measureCapacity()
	o := overloadRun{name: name, factor: factor, timeoutMS: timeoutMS, expect: expect, grpc: grpc, dur: dur,
		before: before.rate, after: after.rate, perCPUBefore: before.perCPU, perCPUAfter: after.perCPU,
		p99Before: before.p99, p99After: after.p99, refusedBefore: before.refused, refusedAfter: after.refused,
		ref: ref, s: res.Summary, cpu: cpu, peak: peak, doorP99: doorP99, expired: expiredServer, probe: p}
	o.report(t)
	o.check(t, before.p50, after.p50)
}

// overloadRun is what an overload scenario measured: the capacity runs before and after, the
// open loop's summary, the gateway's CPU and peak RSS over it, the server's view of the
// refusals at the door (their p99, from gateway_refusal_duration_seconds) and of the requests
// expired after their wait.
type overloadRun struct {
	name                        string
	factor                      float64
	timeoutMS                   int
	expect, grpc                bool
	dur                         time.Duration
	before, after               float64 // capacity, req/s
	perCPUBefore, perCPUAfter   float64 // good answers per gateway CPU-s at capacity
	p99Before, p99After         float64
	refusedBefore, refusedAfter uint64
	ref                         float64 // with a deadline: an open loop's goodput at 1x with it
	s                           loadtest.Summary
	cpu                         time.Duration
	peak                        int64
	doorP99                     float64 // ms, the server's
	expired                     float64 // the server's count
	probe                       *prober
}

// goodput is the open loop's goodput against capacity, or against 1x with the deadline.
func (o *overloadRun) goodput() (float64, string) {
	if o.ref > 0 {
		return o.s.Throughput / o.ref, "1x with the deadline"
	}
	return o.s.Throughput / ((o.before + o.after) / 2), "capacity"
}

// perCPU is good answers per gateway CPU-second in the open loop, and at capacity.
func (o *overloadRun) perCPU() (float64, float64) {
	return float64(o.s.OK2xx) / max(o.cpu.Seconds(), 0.01), (o.perCPUBefore + o.perCPUAfter) / 2
}

// goodputWant is the goodput's target.
func (o *overloadRun) goodputWant() float64 {
	if o.timeoutMS > 0 {
		return pick(0.4, 0.8)
	}
	return pick(0.5, 0.9)
}

// codes are the status codes answered, sorted.
func (o *overloadRun) codes() []string {
	codes := make([]string, 0, len(o.s.StatusCodes))
	for c, n := range o.s.StatusCodes {
		codes = append(codes, fmt.Sprintf("%s=%d", c, n))
	}
	sort.Strings(codes)
	return codes
}

// report logs the run and adds its table to the report.
func (o *overloadRun) report(t *testing.T) {
	s, p := o.s, o.probe
	ratio, refName := o.goodput()
	perCPU, capPerCPU := o.perCPU()
	// A refusal's CPU: what the run used beyond its good answers at capacity's cost each.
	var refusalCPU time.Duration
	if s.Refused > 0 {
		refusalCPU = (o.cpu - time.Duration(float64(s.OK2xx)/capPerCPU*float64(time.Second))) / time.Duration(s.Refused)
	}
	t.Logf("%s: capacity %.1f req/s at c=50 (%.1f before, %.1f after; %.0f and %.0f good answers per gateway CPU-s; %d and %d refused); offered %.1f req/s for %v: goodput %.1f req/s (%.2f of %s), "+
		"%.0f good answers per gateway CPU-s (%.2f of capacity's), success p50 %.0f ms p99 %.0f ms, refusals at once %d p50 %.1f ms p99 %.1f ms (server p99 %.1f ms), "+
		"expired %d (server %.0f) p50 %.0f ms p99 %.0f ms, %.0f µs of gateway CPU per refusal; codes %v, errors %v; RSS peak %s; health %d/%d worst %v; client send delay p50 %.1f ms p99 %.1f ms",
		o.name, (o.before+o.after)/2, o.before, o.after, o.perCPUBefore, o.perCPUAfter, o.refusedBefore, o.refusedAfter, o.factor*o.before, o.dur, s.Throughput, ratio, refName,
		perCPU, perCPU/capPerCPU, s.SuccessLatency.P50, s.SuccessLatency.P99, s.Refused-s.Expired, s.RefusalLatency.P50, s.RefusalLatency.P99, o.doorP99,
		s.Expired, o.expired, s.ExpiredLatency.P50, s.ExpiredLatency.P99, float64(refusalCPU)/1e3, o.codes(), s.ErrorKinds, mib(o.peak), p.ok, p.checks, p.worst,
		s.SendDelay.P50, s.SendDelay.P99)
	deadline := "default_timeout (30s)"
	if o.timeoutMS > 0 {
		deadline = fmt.Sprintf("X-Request-Timeout: %d ms", o.timeoutMS)
		if o.grpc {
			deadline = fmt.Sprintf("a gRPC deadline of %d ms", o.timeoutMS)
		}
	}
	over := ""
	if o.grpc {
		over = " over gRPC (ModelInfer)"
	}
	if o.expect {
		deadline += ", clients send Expect: 100-continue"
	}
	atOnce, expired := "—", "0"
	if n := s.Refused - s.Expired; n > 0 {
		atOnce = fmt.Sprintf("%d: %.1f / %.1f ms, %.1f ms", n, s.RefusalLatency.P50, s.RefusalLatency.P99, o.doorP99)
	}
	if s.Expired > 0 {
		expired = fmt.Sprintf("%d: %.0f / %.0f ms", s.Expired, s.ExpiredLatency.P50, s.ExpiredLatency.P99)
	}
	cpuCell := "—"
	if s.Refused > 0 {
		cpuCell = fmt.Sprintf("%.0f µs", float64(refusalCPU)/1e3)
	}
	targets := fmt.Sprintf("goodput / "+refName+" >= %.2f: %s; served p99 <= 300 ms: %s; refusals at the door p99 <= 25 ms (server) and <= 50 ms (client): %s; "+
		"good answers per gateway CPU-s >= 0.9 of capacity's: %s; RSS < 300 MiB: %s",
		o.goodputWant(), metOrNot(ratio >= o.goodputWant()), metOrNot(s.SuccessLatency.P99 <= 300),
		metOrNot(s.Refused == s.Expired || o.doorP99 <= 25 && s.RefusalLatency.P99 <= 50),
		metOrNot(perCPU >= 0.9*capPerCPU), metOrNot(o.peak < 300<<20))
	if o.factor <= 1 {
		targets = fmt.Sprintf("nothing refused: %s; served p99 no higher than at capacity (c=50, %.0f ms): %s",
			metOrNot(s.Refused == 0), max(o.p99Before, o.p99After), metOrNot(s.SuccessLatency.P99 <= max(o.p99Before, o.p99After)))
	}
	addReport(fmt.Sprintf("3 %s", o.name), fmt.Sprintf("## Open loop at %gx capacity, %s%s\n\nCapacity measured first (closed loop, c=50, the article's payload, no deadline), then an open loop "+
		"(Poisson arrivals) at %gx that rate for %v, then capacity again; goodput (with a deadline: against an open loop at 1x with that deadline, 15 s) and good answers per gateway CPU-second (user + system, /proc/PID/stat) are "+
		"compared with the mean of the two capacity runs. Refusals at once are timed by the client (p50 / p99) and, at the door, by the server (p99 of gateway_refusal_duration_seconds: arrival to answer); "+
		"refusals after a wait in line (expired, X-Refusal: expired) are counted apart. A refusal's CPU is what the gateway used beyond its good answers at capacity's cost each, per refusal.\n\n"+
		"| capacity (c=50): before, after | good answers per gateway CPU-s at capacity | offered | goodput | goodput / "+refName+" | good answers per gateway CPU-s (/ capacity's) | served p50 / p99 | "+
		"refused at once: n, p50 / p99 (client), p99 at the door (server) | expired after a wait: n, p50 / p99 | CPU per refusal | status codes | RSS peak | health checks OK (worst) |\n"+
		"|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"+
		"| %.1f, %.1f req/s | %.0f | %.1f req/s | %.1f req/s | %.2f | %.0f (%.2f) | %.0f / %.0f ms | %s | %s | %s | %s | %s | %d/%d (%v) |\n",
		o.factor, deadline, over, o.factor, o.dur, o.before, o.after, capPerCPU, o.factor*o.before, s.Throughput, ratio, perCPU, perCPU/capPerCPU,
		s.SuccessLatency.P50, s.SuccessLatency.P99, atOnce, expired, cpuCell, strings.Join(o.codes(), " "), mib(o.peak), p.ok, p.checks, p.worst.Round(time.Millisecond))+
		fmt.Sprintf("\nTargets in this run: %s.\n", targets))
}

// check fails the scenario where it does not hold what must always hold (and, in the long
// form, its targets).
func (o *overloadRun) check(t *testing.T, p50Before, p50After float64) {
	s, p := o.s, o.probe
	for c := range s.StatusCodes {
		switch c {
		case "200", "503", "429", "504", "OK", "UNAVAILABLE", "DEADLINE_EXCEEDED":
		default:
			t.Errorf("status %s answered %d times under overload", c, s.StatusCodes[c])
		}
	}
	if n := s.ErrorKinds["timeout"] + s.ErrorKinds["closed"] + s.ErrorKinds["connect"] + s.ErrorKinds["other"]; n > 0 {
		t.Errorf("%d requests got no answer (%v; %v)", n, s.ErrorKinds, s.ErrorSamples)
	}
	if p.fails > 0 {
		t.Errorf("health or metrics failed %d times under overload: %s", p.fails, p.firstFail)
	}
	if o.peak > 500<<20 {
		t.Errorf("RSS peaked at %s under overload (target < 500 MiB)", mib(o.peak))
	}
	if n := o.refusedBefore + o.refusedAfter; n > 0 {
		t.Errorf("%d requests refused in the capacity runs (a closed loop of 50: no overload)", n)
	}
	if o.factor <= 1 {
		// No overload: nothing may be refused. The short form's capacity, 3 s on a machine
		// other packages' tests share, is too rough a yardstick for 0.8 of it.
		if *longForm && s.Refused > 0 {
			t.Errorf("%d requests refused at %gx capacity (%v)", s.Refused, o.factor, o.codes())
		}
		return
	}
	if ratio, refName := o.goodput(); ratio < o.goodputWant() {
		t.Errorf("goodput %.1f req/s is %.2f of %s (want >= %.2f)", s.Throughput, ratio, refName, o.goodputWant())
	}
	// A queue bounded by time: served requests wait no longer than a few times what a
	// closed loop of 50 waits at capacity (a queue bounded by count alone waits far longer:
	// docs/operations.md). Over gRPC, 4 times: grpc-go receives a call's whole message
	// before admission sees it, and the calls being received wait outside the measured line.
	mult := 3.0
	if o.grpc {
		mult = 4
	}
	if lim := mult * max(p50Before, p50After); s.SuccessLatency.P50 > lim {
		t.Errorf("served p50 %.0f ms under %gx overload, more than %gx the p50 at capacity (%.0f ms): a standing queue", s.SuccessLatency.P50, o.factor, mult, lim/mult)
	}
	atOnce := s.Refused - s.Expired
	if *longForm && atOnce > 0 && (s.RefusalLatency.P99 > 50 || o.doorP99 > 25) {
		t.Errorf("refusals answered in %.1f ms at p99 as the client saw them, %.1f ms at the door as the server measured them (targets <= 50 ms and <= 25 ms)", s.RefusalLatency.P99, o.doorP99)
	}
	if !*longForm && atOnce > 0 && s.RefusalLatency.P50 > s.SuccessLatency.P50 {
		// Latencies count from the intended send time: a client that cannot keep its schedule
		// (this test's own process, race-instrumented, sharing 2 CPUs with other packages'
		// tests under make test) adds its lag to both, and their order then says nothing about
		// the server.
		if s.SendDelay.P50 > 50 {
			t.Logf("refusals p50 %.1f ms, successes p50 %.1f ms, not compared: the client sent %.0f ms late at p50",
				s.RefusalLatency.P50, s.SuccessLatency.P50, s.SendDelay.P50)
		} else {
			t.Errorf("refusals (p50 %.1f ms) are slower than successes (p50 %.1f ms): they waited in a queue", s.RefusalLatency.P50, s.SuccessLatency.P50)
		}
	}
}

// sigterm sends the gateway SIGTERM and waits for it to exit (40 s at most): how long it
// took and its exit error.
func sigterm(t *testing.T, g *gateway) (time.Duration, error) {
	t.Helper()
	sigAt := time.Now()
	t.Logf("SIGTERM at %s", sigAt.Format("15:04:05.000"))
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-g.done:
		return time.Since(sigAt), err
	case <-time.After(40 * time.Second):
		t.Fatalf("the gateway did not exit after SIGTERM:\n%s", g.log())
	}
	return 0, nil
}

func metOrNot(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func TestReliabilityOverload4x(t *testing.T) { overload(t, "overload 4x", 4, 0, false) }

// TestReliabilityOverload4xExpect: the same overload from clients that send Expect:
// 100-continue, whose refused requests upload no body.
func TestReliabilityOverload4xExpect(t *testing.T) {
	if !*longForm {
		t.Skip("the long form (-reliability.long) runs it")
	}
	overload(t, "overload 4x expect", 4, 0, true)
}

// TestReliabilityLoad08x: an open loop at 0.8x capacity, no overload: nothing is refused.
func TestReliabilityLoad08x(t *testing.T) {
	if !*longForm {
		t.Skip("the long form (-reliability.long) runs it: 0.8 of a 3 s capacity measurement is too rough a rate on a shared machine")
	}
	overload(t, "load 0.8x", 0.8, 0, false)
}

func TestReliabilityOverload4xDeadline200ms(t *testing.T) {
	overload(t, "overload 4x 200ms", 4, 200, false)
}

func TestReliabilityOverload4xGRPC(t *testing.T) {
	overloadOver(t, "overload 4x grpc", 4, 0, false, true)
}

func TestReliabilityOverload4xDeadline200msGRPC(t *testing.T) {
	overloadOver(t, "overload 4x 200ms grpc", 4, 200, false, true)
}

// shippedModel is the name of configs/gateway.yaml's first model.
func shippedModel(t *testing.T) string {
	t.Helper()
	var doc struct {
		Models []struct{ Name string } `yaml:"models"`
	}
	if err := yaml.Unmarshal([]byte(shippedConfig(t, nil)), &doc); err != nil || len(doc.Models) == 0 {
		t.Fatalf("configs/gateway.yaml: %v", err)
	}
	return doc.Models[0].Name
}

// recorder is a client that records every request it wrote and whether it got an answer:
// an open loop of raw HTTP/1.1 requests over keep-alive connections.
type recorder struct {
	addr                                    string
	body                                    []byte
	written, answered, lost, connectRefused atomic.Int64
	skipped                                 atomic.Int64 // every worker busy: not sent
	codes                                   sync.Map     // status -> *atomic.Int64
	firstLost                               atomic.Value
}

func (r *recorder) count(code int) {
	v, _ := r.codes.LoadOrStore(code, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// run sends at rate until stop is closed, from workers that each keep one connection.
func (r *recorder) run(rate float64, workers int, stop <-chan struct{}) {
	jobs := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			var c net.Conn
			var br *bufio.Reader
			req := fmt.Sprintf("POST /predict/ HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(r.body))
			for range jobs {
				if c != nil {
					// As an HTTP client's pool does: a kept-alive connection the server has
					// closed meanwhile (its FIN arrived) is not reused.
					c.SetReadDeadline(time.Now())
					if _, err := br.Peek(1); err == nil || !isTimeout(err) {
						c.Close()
						c = nil
					}
				}
				if c == nil {
					var err error
					if c, err = net.DialTimeout("tcp", r.addr, 2*time.Second); err != nil {
						r.connectRefused.Add(1) // nothing was written
						c = nil
						continue
					}
					br = bufio.NewReader(c)
				}
				c.SetDeadline(time.Now().Add(60 * time.Second))
				if _, err := io.WriteString(c, req); err != nil {
					c.Close()
					c = nil
					r.connectRefused.Add(1) // the server closed the connection before it was used
					continue
				}
				if _, err := c.Write(r.body); err != nil {
					r.written.Add(1)
					r.lost.Add(1)
					r.firstLost.CompareAndSwap(nil, time.Now().Format("15:04:05.000")+" write: "+err.Error())
					c.Close()
					c = nil
					continue
				}
				r.written.Add(1)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					r.lost.Add(1)
					r.firstLost.CompareAndSwap(nil, time.Now().Format("15:04:05.000")+" read: "+err.Error())
					c.Close()
					c = nil
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				r.answered.Add(1)
				code := resp.StatusCode
				if (code == 503 || code == 429) && resp.Header.Get("Retry-After") == "" {
					code = -code // a refusal without Retry-After
				}
				r.count(code)
				if resp.Close {
					c.Close()
					c = nil
				}
			}
			if c != nil {
				c.Close()
			}
		})
	}
	gap := time.Duration(float64(time.Second) / rate)
	next := time.Now()
	for {
		select {
		case <-stop:
			close(jobs)
			wg.Wait()
			return
		case <-time.After(time.Until(next)):
		}
		next = next.Add(gap)
		select {
		case jobs <- struct{}{}:
		default: // every worker busy: the open loop does not wait (the request is not sent)
			r.skipped.Add(1)
		}
	}
}

// TestReliabilitySIGTERMUnderLoad: SIGTERM at 3x capacity with shutdown_timeout 5s. Every
// request written gets an answer (its result or a 503 with Retry-After), connections are not
// reset under a request, and the process exits 0.
func TestReliabilitySIGTERMUnderLoad(t *testing.T) {
	skipRaceServer(t)
	shared := sharedDir(t)
	article, err := os.ReadFile(filepath.Join(shared, "seed", "rime_5868.json"))
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, shippedConfig(t, map[string]any{"server.shutdown_timeout": "5s", "server.drain_delay": "1s"}))
	capRun, err := loadtest.Run(t.Context(), loadtest.Config{URL: g.url + "/predict/", Bodies: []loadtest.Body{{Data: article}},
		Headers: []loadtest.Header{{Name: "Content-Type", Value: "application/json"}}, Concurrency: 50,
		Duration: pick(3*time.Second, 8*time.Second), KeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	rate := 3 * capRun.Summary.Throughput
	r := &recorder{addr: strings.TrimPrefix(g.url, "http://"), body: article}
	stop := make(chan struct{})
	ran := make(chan struct{})
	go func() { r.run(rate, 256, stop); close(ran) }()
	time.Sleep(pick(3*time.Second, 10*time.Second))
	exitAfter, exitErr := sigterm(t, g)
	time.Sleep(200 * time.Millisecond)
	close(stop)
	<-ran
	codes := map[int]int64{}
	r.codes.Range(func(k, v any) bool { codes[k.(int)] = v.(*atomic.Int64).Load(); return true })
	t.Logf("SIGTERM at %.0f req/s (3x %.1f): %d written, %d answered %v, %d lost; not sent: %d (connection refused or closed before use), %d (every worker busy); exit %v after %v",
		rate, capRun.Summary.Throughput, r.written.Load(), r.answered.Load(), codes, r.lost.Load(), r.connectRefused.Load(), r.skipped.Load(), exitErr, exitAfter.Round(time.Millisecond))
	addReport("4 sigterm", fmt.Sprintf("## SIGTERM under load\n\nAn open loop at 3x capacity over keep-alive connections; SIGTERM with "+
		"`drain_delay: 1s`, `shutdown_timeout: 5s`. The client records every request it wrote.\n\n"+
		"| offered | written | answered | answers | lost | not sent: connection refused or closed before use | not sent: every client worker busy | exit | exit after SIGTERM |\n|---|---|---|---|---|---|---|---|---|\n"+
		"| %.0f req/s | %d | %d | %v | %d | %d | %d | %v | %v |\n",
		rate, r.written.Load(), r.answered.Load(), codes, r.lost.Load(), r.connectRefused.Load(), r.skipped.Load(), exitCode(exitErr), exitAfter.Round(time.Millisecond)))
	if exitErr != nil {
		t.Errorf("the gateway exited with %v:\n%s", exitErr, g.log())
	}
	if n := r.lost.Load(); n > 0 {
		t.Errorf("%d requests written got no answer (first: %v)", n, r.firstLost.Load())
	}
	for code, n := range codes {
		if code != 200 && code != 503 && code != 429 {
			t.Errorf("%d requests answered %d (negative: a refusal without Retry-After)", n, code)
		}
	}
	if codes[200] == 0 {
		t.Errorf("no request succeeded")
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func exitCode(err error) string {
	if err == nil {
		return "0"
	}
	return err.Error()
}

// TestReliabilitySlowloris: connections send their headers a byte at a time. They are cut
// off by server.read_timeout with a 408, and meanwhile health checks and predictions pass.
func TestReliabilitySlowloris(t *testing.T) {
	skipRaceServer(t)
	img := rocket(t)
	g := startGateway(t, shippedConfig(t, map[string]any{"server.read_timeout": "2s"}))
	n, dur := pick(100, 400), pick(4*time.Second, 15*time.Second)
	p := startProber(g, img, 250*time.Millisecond)
	var got408, closed, other atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			c, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
			if err != nil {
				other.Add(1)
				return
			}
			defer c.Close()
			hdr := "POST /predict/ HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("s", 100)
			done := make(chan struct{})
			go func() {
				defer close(done)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				switch {
				case err != nil:
					closed.Add(1)
				case resp.StatusCode == 408:
					got408.Add(1)
				default:
					other.Add(1)
				}
			}()
			for i := 0; i < len(hdr); i++ {
				select {
				case <-done:
					return
				case <-time.After(200 * time.Millisecond):
				}
				if _, err := c.Write([]byte{hdr[i]}); err != nil {
					break
				}
			}
			<-done
		})
	}
	time.Sleep(dur)
	p.finish()
	wg.Wait()
	t.Logf("%d slowloris connections: %d got 408, %d closed, %d other; health %d/%d, predictions %d/%d, worst probe %v",
		n, got408.Load(), closed.Load(), other.Load(), p.ok, p.checks, p.predictsOK, p.predicts, p.worst)
	addReport("5 slowloris", fmt.Sprintf("## Slowloris\n\n%d connections send their headers one byte every 200 ms (`read_timeout: 2s`).\n\n"+
		"| connections | answered 408 | closed without answer | other | health checks OK | predictions OK | worst probe |\n|---|---|---|---|---|---|---|\n"+
		"| %d | %d | %d | %d | %d/%d | %d/%d | %v |\n", n, n, got408.Load(), closed.Load(), other.Load(), p.ok, p.checks, p.predictsOK, p.predicts, p.worst.Round(time.Millisecond)))
	if p.fails > 0 || p.predictsOK < p.predicts {
		t.Errorf("the server stopped serving under slowloris: %d health failures (%s), %d/%d predictions", p.fails, p.firstFail, p.predictsOK, p.predicts)
	}
	if got408.Load() == 0 || other.Load() > 0 {
		t.Errorf("slow headers: %d answered 408, %d other answers", got408.Load(), other.Load())
	}
}

// TestReliabilityIdleLockout: with max_connections 100, 150 clients open keep-alive
// connections and go idle. New clients still get predictions and health checks: the idle
// connections are closed first, and over the limit health stays reachable.
func TestReliabilityIdleLockout(t *testing.T) {
	skipRaceServer(t)
	img := rocket(t)
	g := startGateway(t, shippedConfig(t, map[string]any{"server.max_connections": 100}))
	addr := strings.TrimPrefix(g.url, "http://")
	idle := pick(150, 300)
	var conns []net.Conn
	for range idle {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		io.WriteString(c, "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			resp.Body.Close()
		}
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	time.Sleep(1200 * time.Millisecond) // all idle now
	ok, bad := 0, 0
	var firstBad string
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range pick(20, 100) {
		path, ct, body := "/predict/", "image/jpeg", img
		if i%2 == 1 {
			path, ct, body = "/v2/health/ready", "", nil
		}
		var resp *http.Response
		var err error
		if body != nil {
			resp, err = client.Post(g.url+path, ct, bytes.NewReader(body))
		} else {
			resp, err = client.Get(g.url + path)
		}
		if err == nil && resp.StatusCode == 200 {
			ok++
		} else {
			bad++
			if firstBad == "" {
				if err != nil {
					firstBad = err.Error()
				} else {
					firstBad = resp.Status
				}
			}
		}
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	evicted := g.metric("gateway_connections_closed_idle_total", "")
	t.Logf("%d idle keep-alive connections at max_connections 100: %d/%d new requests answered 200, %v idle connections closed", idle, ok, ok+bad, evicted)
	addReport("6 idle lockout", fmt.Sprintf("## Idle keep-alive lockout\n\n`max_connections: 100`; %d clients open keep-alive connections, make one request and go idle; "+
		"then new clients alternate predictions and readiness checks, one connection each.\n\n"+
		"| idle connections | new requests answered 200 | idle connections closed to admit them |\n|---|---|---|\n| %d | %d/%d | %.0f |\n",
		idle, idle, ok, ok+bad, evicted))
	if bad > 0 {
		t.Errorf("%d of %d new requests failed with %d idle connections open (first: %s)", bad, ok+bad, idle, firstBad)
	}
}

// TestReliabilityTwoTenants: two API keys, "flood" limited to 10 requests a second and
// "steady" to 50; steady sends 20 a second (Poisson) alone, then again while flood sends 40 a
// second, 4x its limit, then alone again (and once beside flood at its limit, which tells what
// flood's admitted requests cost steady from what its refused excess costs). Steady sees no refusal either time; flood's excess is refused with 429
// (Retry-After) on its headers, and what it is let through is its rate. Steady's latency with
// and without the flood is reported (a measurement, not a threshold).
func TestReliabilityTwoTenants(t *testing.T) {
	skipRaceServer(t)
	keys := filepath.Join(t.TempDir(), "keys.yaml")
	const flood, steady = "flood-key-0123456789abcdef", "steady-key-0123456789abcdef"
	if err := os.WriteFile(keys, []byte(fmt.Sprintf("keys:\n  - {name: flood, key: %s, rate: 10, burst: 10}\n  - {name: steady, key: %s, rate: 50}\n", flood, steady)), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, shippedConfig(t, map[string]any{"server.api_keys": map[string]any{"file": keys}}))
	article, err := os.ReadFile(filepath.Join(sharedDir(t), "seed", "rime_5868.json"))
	if err != nil {
		t.Fatal(err)
	}
	dur := pick(5*time.Second, 20*time.Second)
	run := func(key string, rate float64) *loadtest.Result {
		res, err := loadtest.Run(t.Context(), loadtest.Config{URL: g.url + "/predict/", Bodies: []loadtest.Body{{Data: article}},
			Headers: []loadtest.Header{{Name: "Content-Type", Value: "application/json"}, {Name: "X-API-Key", Value: key}},
			Rate:    rate, Arrival: loadtest.ArrivalPoisson, Seed: 7, Concurrency: 64, Duration: dur, WarmupDuration: time.Second, KeepAlive: true})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	beside := func(floodRate float64) (steadyRes, floodRes *loadtest.Result) {
		done := make(chan struct{})
		go func() { defer close(done); floodRes = run(flood, floodRate) }()
		steadyRes = run(steady, 20)
		<-done
		return steadyRes, floodRes
	}
	alone := run(steady, 20)
	// Flood within its limit first: what its admitted requests cost steady, apart from what
	// its refused excess costs.
	atLimit, _ := beside(10)
	shared, floodRes := beside(40)
	after := run(steady, 20) // alone again: the machine's drift shows between the two
	for name, r := range map[string]*loadtest.Result{"steady alone": alone, "steady beside flood at its limit": atLimit,
		"steady beside the flood": shared, "steady alone after": after} {
		if r.Summary.Errors > 0 || r.Summary.OK2xx == 0 {
			t.Errorf("%s: %d of %d requests failed: %v", name, r.Summary.Errors, r.Summary.Completed, r.Summary.StatusCodes)
		}
	}
	fs := floodRes.Summary
	limited, ok := fs.StatusCodes["429"], fs.OK2xx
	// Let through: its rate over the measured window (the warm-up took the burst), within a
	// few requests either way; the rest refused, nothing else.
	if want := 10 * dur.Seconds(); float64(ok) < want*0.8 || float64(ok) > want*1.2+10 || limited == 0 || ok+limited != fs.Completed {
		t.Errorf("flood: %d answered, %d refused (429), of %d: %v; want about %.0f answered and the rest 429", ok, limited, fs.Completed, fs.StatusCodes, want)
	}
	ratio := shared.Summary.Latency.P99 / max(alone.Summary.Latency.P99, after.Summary.Latency.P99)
	t.Logf("steady's p99 %.1f ms alone, %.1f ms beside flood at its limit, %.1f ms beside flood at 4x (%.2fx the worse alone, %.2fx beside flood at its limit), %.1f ms alone after; flood: %d answered, %d refused",
		alone.Summary.Latency.P99, atLimit.Summary.Latency.P99, shared.Summary.Latency.P99, ratio, shared.Summary.Latency.P99/atLimit.Summary.Latency.P99,
		after.Summary.Latency.P99, ok, limited)
	addReport("9 two tenants", fmt.Sprintf("## Two tenants\n\nAPI keys `flood` (10 req/s) and `steady` (50 req/s); steady sends 20 req/s (Poisson) for %v, alone and while flood sends 40 req/s (4x its limit); the article's payload.\n\n"+
		"| run | steady answered | steady refused | steady p50 | steady p99 | flood answered | flood refused (429) |\n|---|---|---|---|---|---|---|\n"+
		"| steady alone | %d | %d | %.1f ms | %.1f ms | | |\n| beside flood at its limit (10 req/s) | %d | %d | %.1f ms | %.1f ms | | |\n| beside the flood (40 req/s) | %d | %d | %.1f ms | %.1f ms (%.2fx the worse alone) | %d | %d |\n| steady alone after | %d | %d | %.1f ms | %.1f ms | | |\n",
		dur, alone.Summary.OK2xx, alone.Summary.Errors, alone.Summary.Latency.P50, alone.Summary.Latency.P99,
		atLimit.Summary.OK2xx, atLimit.Summary.Errors, atLimit.Summary.Latency.P50, atLimit.Summary.Latency.P99,
		shared.Summary.OK2xx, shared.Summary.Errors, shared.Summary.Latency.P50, shared.Summary.Latency.P99, ratio, ok, limited,
		after.Summary.OK2xx, after.Summary.Errors, after.Summary.Latency.P50, after.Summary.Latency.P99))
}

// histogram reads a histogram's cumulative bucket counts from /metrics, by upper bound (+Inf
// included).
func (g *gateway) histogram(name string) map[float64]float64 {
	g.t.Helper()
	b := map[float64]float64{}
	for _, line := range strings.Split(g.metricsText(), "\n") {
		rest, ok := strings.CutPrefix(line, name+`_bucket{le="`)
		if !ok {
			continue
		}
		le, count, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		bound, err1 := strconv.ParseFloat(le, 64)
		n, err2 := strconv.ParseFloat(count, 64)
		if err1 != nil || err2 != nil {
			g.t.Fatalf("bad histogram line %q", line)
		}
		b[bound] = n
	}
	return b
}

// quantile estimates the q-quantile of what a histogram counted between two readings
// (before: the earlier one), interpolating within the bucket as Prometheus' histogram_quantile
// does; in the +Inf bucket it answers the largest finite bound. 0 when nothing was counted.
func quantile(after, before map[float64]float64, q float64) float64 {
	bounds := make([]float64, 0, len(after))
	for le := range after {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 {
		return 0
	}
	total := after[bounds[len(bounds)-1]] - before[bounds[len(bounds)-1]]
	if total <= 0 {
		return 0
	}
	rank, prevLe, prevCum := q*total, 0.0, 0.0
	for _, le := range bounds {
		cum := after[le] - before[le]
		if cum >= rank {
			if math.IsInf(le, 1) {
				return prevLe
			}
			return prevLe + (le-prevLe)*(rank-prevCum)/max(cum-prevCum, 1)
		}
		prevLe, prevCum = le, cum
	}
	return prevLe
}
