package main

import (
	"bytes"
	"strings"
	"testing"
)

// A report as perf writes it (perf report --stdio --no-children --sort dso,sym -F
// overhead,dso,sym --field-separator '|'): every line counted in its part, a library without
// symbols as one entry, the parts in decreasing share.
func TestSummarize(t *testing.T) {
	report := `# To display the perf.data header info, please use --header/--header-only options.
#
# Samples: 9K of event 'cpu-clock'
# Overhead|Shared Object           |Symbol
 30.00%  |libjpeg.so.62.3.0       |[.] 0x0000000000023208
 10.00%  |libjpeg.so.62.3.0       |[.] 0x00000000000231e3
 25.00%  |libonnxruntime.so.1.24.3|[.] 0x000000000092a11c
  5.00%  |[kernel.kallsyms]       |[k] pvm_irq_enable
  4.00%  |gateway                 |[.] github.com/imagegate/imagegate/preprocess/internal/resample.hpass3Blocks
  1.00%  |gateway                 |[.] github.com/imagegate/imagegate/preprocess.(*Preprocessor).jpegHeader
  2.00%  |gateway                 |[.] ig_jpeg_decode_stop
  3.00%  |gateway                 |[.] runtime.mallocgc
  1.50%  |gateway                 |[.] github.com/valyala/fasthttp.(*Server).serveConnCounted
  1.00%  |gateway                 |[.] github.com/imagegate/imagegate/gateway/internal/wire.decodeStdBase64Vec
  0.50%  |gateway                 |[.] github.com/imagegate/imagegate/batcher.(*Batcher[go.shape.int]).loop
  2.00%  |libc.so.6               |[.] __memset_avx512_unaligned_erms
  1.00%  |[vdso]                  |[.] 0x00000000000007bd
  0.00%  |gateway                 |[.] bytes.TrimSpace
`
	totals, err := summarize(strings.NewReader(report))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"decode (libjpeg-turbo, libspng, zlib)":                   42,
		"inference (ONNX Runtime)":                                25,
		"kernel (system calls, page faults, scheduling, network)": 5,
		"resize, crop, normalize (preprocess)":                    5,
		"Go runtime (scheduler, GC, allocation, cgo calls)":       3,
		"HTTP, JSON, base64 (fasthttp, wire, net)":                2.5,
		"gateway, batcher, admission (imagegate's own code)":      0.5,
		"libc (memcpy, malloc, ...)":                              2,
		"other":                                                   1,
	}
	for _, tot := range totals {
		if d := tot.share - want[tot.name]; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: %v %%, want %v", tot.name, tot.share, want[tot.name])
		}
	}
	var out bytes.Buffer
	write(&out, totals, 10)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2+9 || !strings.HasPrefix(lines[2], "| decode (libjpeg-turbo, libspng, zlib) | 42.0 % | 4.20 | `libjpeg.so.62.3.0` 40.0 %, `ig_jpeg_decode_stop` 2.0 % |") ||
		!strings.HasPrefix(lines[3], "| inference (ONNX Runtime) | 25.0 % | 2.50 |") || !strings.Contains(out.String(), "`[vdso]` 1.0 %") {
		t.Errorf("table:\n%s", out.String())
	}
	if _, err := summarize(strings.NewReader("# nothing\n")); err == nil {
		t.Error("an empty report summarized")
	}
}
