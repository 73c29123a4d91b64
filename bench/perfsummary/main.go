// Command perfsummary says where a process's CPU time went, by part of the gateway's work, from
// a perf profile: it reads `perf report --stdio --no-children --sort dso,sym -F overhead,dso,sym
// --field-separator '|' --percent-limit 0` on its standard input and writes a Markdown table of
// the parts (decode, resize, inference, HTTP, the gateway's own code, the Go runtime, the
// kernel, libc, other), each with its share of the samples, its CPU time per image when
// -cpu-per-image (ms) is given, and its three largest symbols. bench/run.sh runs it on a profile
// of the gateway under load.
package main

import (
	"bufio"
	"cmp"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// part is where a symbol's time counts.
type part struct {
	name  string
	match func(dso, sym string) bool
}

func has(s string, subs ...string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// parts, first match wins. A Go symbol is named by its package path; the C code the gateway
// links is named by its library (libjpeg, libspng, ONNX Runtime), or by the ig_ prefix of its
// own cgo C functions (preprocess's libjpeg driver, runtime/ort's malloc_trim).
var parts = []part{
	{"kernel (system calls, page faults, scheduling, network)", func(dso, sym string) bool {
		return strings.HasPrefix(dso, "[kernel") || strings.HasPrefix(sym, "[k]")
	}},
	{"inference (ONNX Runtime)", func(dso, sym string) bool { return has(dso, "libonnxruntime") }},
	{"decode (libjpeg-turbo, libspng, zlib)", func(dso, sym string) bool {
		return has(dso, "libjpeg", "libturbojpeg", "libspng", "libz.", "libwebp") || has(sym, "] ig_jpeg", "] ig_png", "preprocess.(*jpegDecoder)")
	}},
	{"resize, crop, normalize (preprocess)", func(dso, sym string) bool { return has(sym, "imagegate/preprocess") }},
	{"HTTP, JSON, base64 (fasthttp, wire, net)", func(dso, sym string) bool {
		return has(sym, "valyala/fasthttp", "gateway/internal/wire", "gateway/internal/netx", "] net.", "] net/", "internal/poll.", "] bufio.",
			"encoding/base64", "encoding/json", "] syscall.", "internal/syscall", "google.golang.org/grpc", "golang.org/x/net/http2", "klauspost/compress", "compress/")
	}},
	{"gateway, batcher, admission (imagegate's own code)", func(dso, sym string) bool {
		return has(sym, "imagegate/gateway", "imagegate/batcher", "imagegate/internal", "imagegate/runtime", "yalue/onnxruntime_go", "VictoriaMetrics")
	}},
	{"Go runtime (scheduler, GC, allocation, cgo calls)", func(dso, sym string) bool {
		return has(sym, "] runtime.", "] internal/runtime", "] sync.", "] sync/atomic.", "] gcWriteBarrier", "] aeshash", "] memeqbody",
			"] indexbytebody", "] cmpbody", "] _cgo_", "] crosscall", "] x_cgo", "] time.", "] context.")
	}},
	{"libc (memcpy, malloc, ...)", func(dso, sym string) bool { return has(dso, "libc.so", "libc-", "libm.so", "ld-linux") }},
}

const other = "other"

type symbol struct {
	name  string
	share float64
}

type total struct {
	name  string
	share float64
	syms  []symbol
}

// summarize reads perf report's lines ("12.34%|dso|[.] sym") and sums them by part.
func summarize(r io.Reader) ([]total, error) {
	byName := map[string]*total{}
	var order []*total
	for _, p := range append(parts, part{name: other}) {
		t := &total{name: p.name}
		byName[p.name] = t
		order = append(order, t)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	lines := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.SplitN(line, "|", 3)
		if len(f) != 3 || !strings.HasSuffix(strings.TrimSpace(f[0]), "%") {
			continue
		}
		share, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(f[0]), "%"), 64)
		if err != nil {
			continue
		}
		lines++
		dso, sym := strings.TrimSpace(f[1]), strings.TrimSpace(f[2])
		name := other
		for _, p := range parts {
			if p.match(dso, sym) {
				name = p.name
				break
			}
		}
		t := byName[name]
		t.share += share
		label := strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(sym, "[.]"), "[k]"))
		switch {
		case label == "" || strings.HasPrefix(label, "0x"): // a library without symbols: counted whole
			label = dso
		case name == other:
			label += " (" + dso + ")"
		}
		if i := slices.IndexFunc(t.syms, func(s symbol) bool { return s.name == label }); i >= 0 {
			t.syms[i].share += share
		} else {
			t.syms = append(t.syms, symbol{label, share})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if lines == 0 {
		return nil, fmt.Errorf("no samples in the report (perf report --stdio --field-separator '|' -F overhead,dso,sym)")
	}
	out := make([]total, len(order))
	for i, t := range order {
		out[i] = *t
	}
	return out, nil
}

// write writes the table: the parts in decreasing share, each with its three largest
// symbols; cpuPerImage (ms, 0: unknown) gives each part's time per image.
func write(w io.Writer, totals []total, cpuPerImage float64) {
	slices.SortStableFunc(totals, func(a, b total) int { return cmp.Compare(b.share, a.share) })
	if cpuPerImage > 0 {
		fmt.Fprintf(w, "| part | share of the gateway's CPU | CPU ms per image | largest symbols |\n|---|---|---|---|\n")
	} else {
		fmt.Fprintf(w, "| part | share of the gateway's CPU | largest symbols |\n|---|---|---|\n")
	}
	for _, t := range totals {
		if t.share < 0.05 {
			continue
		}
		slices.SortStableFunc(t.syms, func(a, b symbol) int { return cmp.Compare(b.share, a.share) })
		var top []string
		for _, s := range t.syms[:min(3, len(t.syms))] {
			top = append(top, fmt.Sprintf("`%s` %.1f %%", strings.ReplaceAll(shorten(s.name), "|", `\|`), s.share))
		}
		if cpuPerImage > 0 {
			fmt.Fprintf(w, "| %s | %.1f %% | %.2f | %s |\n", t.name, t.share, cpuPerImage*t.share/100, strings.Join(top, ", "))
		} else {
			fmt.Fprintf(w, "| %s | %.1f %% | %s |\n", t.name, t.share, strings.Join(top, ", "))
		}
	}
}

// shorten drops the module path of a Go symbol and bounds a C++ one's length.
func shorten(s string) string {
	s = strings.ReplaceAll(s, "github.com/imagegate/imagegate/", "")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

func main() {
	cpu := flag.Float64("cpu-per-image", 0, "the process's CPU time per image (ms), to give each part's")
	flag.Parse()
	totals, err := summarize(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "perfsummary:", err)
		os.Exit(1)
	}
	write(os.Stdout, totals, *cpu)
}
