package ort

import (
	"encoding/binary"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// runBoth runs the model at path as it is and rewritten, on the same random batch of n, and
// returns both outputs and the rewritten session's site count.
func runBoth(t *testing.T, path string, shape []int64, n int) (orig, rewritten []float32, sites int) {
	t.Helper()
	rng := rand.New(rand.NewSource(7))
	var in []float32
	for _, rewrite := range []bool{false, true} {
		s, err := NewSession[float32](SessionConfig{ModelPath: path, InputName: "input", OutputName: "output",
			InputShape: shape, MaxBatchSize: n, IntraOp: 1, InterOp: 1, RewriteHardSwish: rewrite})
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			row := s.Input(i)
			if in == nil || len(in) < (i+1)*len(row) {
				for range row {
					in = append(in, float32((rng.Float64()-0.45)/0.225)) // a noise image, normalized
				}
			}
			copy(row, in[i*len(row):])
		}
		out, err := s.Run(n)
		if err != nil {
			t.Fatal(err)
		}
		if rewrite {
			rewritten, sites = append([]float32(nil), out...), s.HardSwishRewrites()
		} else {
			orig = append([]float32(nil), out...)
			if s.HardSwishRewrites() != 0 {
				t.Errorf("RewriteHardSwish false: %d sites rewritten", s.HardSwishRewrites())
			}
		}
		s.Close()
	}
	return orig, rewritten, sites
}

func maxAbsDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// argmax of each row of n.
func top1(out []float32, n int) []int {
	c := len(out) / n
	var r []int
	for i := range n {
		best := 0
		for j := 1; j < c; j++ {
			if out[i*c+j] > out[i*c+best] {
				best = j
			}
		}
		r = append(r, best)
	}
	return r
}

// opCount counts the nodes of each op type in an ONNX model's graph.
func opCount(t *testing.T, model []byte) map[string]int {
	t.Helper()
	mfs, err := fields(model)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, f := range mfs {
		if f.num != modelGraph {
			continue
		}
		gfs, err := fields(f.val)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gfs {
			if g.num == graphNode {
				nd, err := parseNode(g.val)
				if err != nil {
					t.Fatal(err)
				}
				n[nd.opType]++
			}
		}
	}
	return n
}

// The shipped MobileNetV3: every HardSwish after a convolution (18 of its 19; the last follows
// the classifier's Gemm) is rewritten, the logits stay within the 1e-4 the model's torch
// reference is checked to (reference computed here, by the same ONNX Runtime on this
// machine, from the model as it is), the top-1 class of each row is the same, and on a CPU
// where ONNX Runtime uses its blocked layout the optimized graph has fewer reorders.
func TestHardSwishRewriteKeepsResults(t *testing.T) {
	initORT(t)
	orig, rw, sites := runBoth(t, defaultModel, []int64{3, 224, 224}, 3)
	want := 0
	if runtime.GOARCH == "amd64" {
		want = 18
	}
	if sites != want {
		t.Fatalf("%d HardSwish sites rewritten, want %d", sites, want)
	}
	// Float32 rounding moves with the HardSigmoid's: a relative bound, 1e-5 of the largest
	// logit (this untrained network's logits reach tens on noise).
	scale := 1.0
	for _, v := range orig {
		scale = math.Max(scale, math.Abs(float64(v)))
	}
	if d := maxAbsDiff(orig, rw); d > 1e-5*scale {
		t.Errorf("logits moved by %g with the rewrite (largest logit %g)", d, scale)
	} else {
		t.Logf("max |Δ logit| %g, largest logit %g", d, scale)
	}
	if a, b := top1(orig, 3), top1(rw, 3); a[0] != b[0] || a[1] != b[1] || a[2] != b[2] {
		t.Errorf("top-1 %v as it is, %v rewritten", a, b)
	}
	if runtime.GOARCH != "amd64" {
		return
	}

	// ONNX Runtime's optimized graphs, written by the sessions.
	dir := t.TempDir()
	reorders := map[bool]int{}
	for _, rewrite := range []bool{false, true} {
		p := filepath.Join(dir, "opt.onnx")
		s, err := NewSession[float32](SessionConfig{ModelPath: defaultModel, InputName: "input", OutputName: "output",
			InputShape: []int64{3, 224, 224}, MaxBatchSize: 1, IntraOp: 1, InterOp: 1, RewriteHardSwish: rewrite,
			OptimizedModelPath: p})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		c := opCount(t, b)
		reorders[rewrite] = c["ReorderInput"] + c["ReorderOutput"]
		if rewrite && c["HardSigmoid"] > 1 {
			t.Errorf("rewritten: %d HardSigmoid nodes left unfused (want at most the classifier's)", c["HardSigmoid"])
		}
	}
	t.Logf("layout reorders in ONNX Runtime's optimized graph: %d as it is, %d rewritten", reorders[false], reorders[true])
	if reorders[false] == 0 {
		t.Skip("ONNX Runtime uses no blocked layout on this CPU: nothing for the rewrite to keep")
	}
	if reorders[true] >= reorders[false] {
		t.Errorf("the rewrite left %d reorders (%d before)", reorders[true], reorders[false])
	}
}

// A small model, written here, with each kind of site and one that must be left alone:
//
//	input [N,16,8,8] → Conv A → HardSwish                        (rewritten)
//	                 → Conv B → HardSigmoid, Mul(B, ·)           (rewritten: B has 2 consumers)
//	                 → Conv C → HardSigmoid                      (left: ONNX Runtime fuses it)
//	                 → Relu   → HardSwish                        (left: not after a Conv)
//	the four summed → GlobalAveragePool → Flatten → output [N,16]
func TestHardSwishRewriteSites(t *testing.T) {
	initORT(t)
	rng := rand.New(rand.NewSource(3))
	weight := func(name string) []byte {
		raw := make([]byte, 16*16*4)
		for i := 0; i < len(raw); i += 4 {
			binary.LittleEndian.PutUint32(raw[i:], math.Float32bits(float32(rng.NormFloat64()*0.3)))
		}
		var b []byte
		for _, d := range []int64{16, 16, 1, 1} {
			b = protowire.AppendTag(b, tensorDims, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(d))
		}
		b = protowire.AppendTag(b, tensorDataType, protowire.VarintType)
		b = protowire.AppendVarint(b, tensorFloat)
		b = appendString(b, tensorName, name)
		b = protowire.AppendTag(b, tensorRawData, protowire.BytesType)
		return protowire.AppendBytes(b, raw)
	}
	node := func(op string, in []string, out string, attrs ...[]byte) []byte {
		return encodeNode(onnxNode{inputs: in, outputs: []string{out}, name: op + "_" + out, opType: op, attrs: attrs})
	}
	// valueInfo: a float tensor named name of shape dims (0: a symbolic batch axis).
	valueInfo := func(name string, dims ...int64) []byte {
		var shape []byte
		for _, d := range dims {
			var dim []byte
			if d == 0 {
				dim = appendString(nil, 2, "N") // dim_param
			} else {
				dim = protowire.AppendTag(nil, 1, protowire.VarintType) // dim_value
				dim = protowire.AppendVarint(dim, uint64(d))
			}
			shape = appendMessage(shape, 1, dim)
		}
		tensor := protowire.AppendTag(nil, 1, protowire.VarintType) // elem_type
		tensor = protowire.AppendVarint(tensor, tensorFloat)
		tensor = appendMessage(tensor, 2, shape)
		typ := appendMessage(nil, 1, tensor) // TypeProto.tensor_type
		return appendMessage(appendString(nil, valueInfoName, name), 2, typ)
	}
	var g []byte
	for _, n := range [][]byte{
		node("Conv", []string{"input", "wa"}, "a"), node("HardSwish", []string{"a"}, "ha"),
		node("Conv", []string{"input", "wb"}, "b"),
		node("HardSigmoid", []string{"b"}, "sb", floatAttr("alpha", 1.0/6), floatAttr("beta", 0.5)),
		node("Mul", []string{"b", "sb"}, "hb"),
		node("Conv", []string{"input", "wc"}, "c"),
		node("HardSigmoid", []string{"c"}, "hc", floatAttr("alpha", 0.2), floatAttr("beta", 0.5)),
		node("Relu", []string{"input"}, "r"), node("HardSwish", []string{"r"}, "hr"),
		node("Sum", []string{"ha", "hb", "hc", "hr"}, "s"),
		node("GlobalAveragePool", []string{"s"}, "p"), node("Flatten", []string{"p"}, "output"),
	} {
		g = appendMessage(g, graphNode, n)
	}
	g = appendString(g, 2, "sites")
	for _, w := range []string{"wa", "wb", "wc"} {
		g = appendMessage(g, graphInitializer, weight(w))
	}
	g = appendMessage(g, graphInput, valueInfo("input", 0, 16, 8, 8))
	g = appendMessage(g, 12, valueInfo("output", 0, 16))
	opset := appendString(nil, 1, "")
	opset = protowire.AppendTag(opset, 2, protowire.VarintType)
	opset = protowire.AppendVarint(opset, 17)
	m := protowire.AppendTag(nil, 1, protowire.VarintType) // ir_version
	m = protowire.AppendVarint(m, 8)
	m = appendMessage(m, 8, opset)
	m = appendMessage(m, modelGraph, g)

	rw, sites, err := rewriteHardSwish(m)
	if err != nil {
		t.Fatal(err)
	}
	if sites != 2 {
		t.Errorf("%d sites rewritten, want 2 (Conv A's HardSwish, Conv B's HardSigmoid)", sites)
	}
	ops := opCount(t, rw)
	if ops["Conv"] != 5 || ops["HardSwish"] != 1 || ops["HardSigmoid"] != 3 || ops["Mul"] != 2 {
		t.Errorf("rewritten graph's ops: %v", ops)
	}
	// Rewriting again finds only what the first rewrite left: the HardSigmoid of the
	// identity convolutions have one consumer each.
	if _, again, err := rewriteHardSwish(rw); err != nil || again != 0 {
		t.Errorf("a rewritten model rewritten again: %d sites, %v", again, err)
	}

	path := filepath.Join(t.TempDir(), "sites.onnx")
	if err := os.WriteFile(path, m, 0o644); err != nil {
		t.Fatal(err)
	}
	orig, got, n := runBoth(t, path, []int64{16, 8, 8}, 2)
	if runtime.GOARCH == "amd64" && n != 2 {
		t.Errorf("the session rewrote %d sites, want 2", n)
	}
	if d := maxAbsDiff(orig, got); d > 1e-5 {
		t.Errorf("outputs moved by %g with the rewrite", d)
	}
}

// Models the rewrite must leave to ONNX Runtime: external data (found relative to the
// model's file), weights that are not float32, and bytes that are not a model.
func TestHardSwishRewriteRefuses(t *testing.T) {
	tensor := appendString(nil, tensorName, "w")
	tensor = protowire.AppendTag(tensor, tensorLocation, protowire.VarintType)
	tensor = protowire.AppendVarint(tensor, 1)
	g := appendMessage(nil, graphInitializer, tensor)
	if _, _, err := rewriteHardSwish(appendMessage(nil, modelGraph, g)); err != errExternalData {
		t.Errorf("external data: err = %v", err)
	}
	// A float16 model: its identity weights would have to be float16 too.
	half := appendString(nil, tensorName, "w")
	for _, d := range []int64{16, 16, 1, 1} {
		half = protowire.AppendTag(half, tensorDims, protowire.VarintType)
		half = protowire.AppendVarint(half, uint64(d))
	}
	half = protowire.AppendTag(half, tensorDataType, protowire.VarintType)
	half = protowire.AppendVarint(half, 10) // FLOAT16
	g = appendMessage(nil, graphInitializer, half)
	g = appendMessage(g, graphNode, encodeNode(onnxNode{inputs: []string{"x", "w"}, outputs: []string{"a"}, opType: "Conv"}))
	g = appendMessage(g, graphNode, encodeNode(onnxNode{inputs: []string{"a"}, outputs: []string{"y"}, opType: "HardSwish"}))
	m := appendMessage(nil, modelGraph, g)
	if out, n, err := rewriteHardSwish(m); err != nil || n != 0 || string(out) != string(m) {
		t.Errorf("float16 weights: %d sites, err %v, model changed: %v", n, err, string(out) != string(m))
	}
	for _, b := range [][]byte{{0xff, 0xff}, {0x3a, 0x10, 1}, nil} {
		if _, _, err := rewriteHardSwish(b); err == nil {
			t.Errorf("%x: no error", b)
		}
	}
}

// A rewritten model that ONNX Runtime refuses is loaded as it is: the rewrite never costs a
// model its session.
func TestHardSwishRewriteRefusedFallsBack(t *testing.T) {
	initORT(t)
	defer func() { rewriteModel = rewriteHardSwish }()
	rewriteModel = func(m []byte) ([]byte, int, error) {
		return appendMessage(nil, modelGraph, nil), 1, nil // a model with an empty graph
	}
	s, err := NewSession[float32](SessionConfig{ModelPath: defaultModel, InputName: "input", OutputName: "output",
		InputShape: []int64{3, 224, 224}, MaxBatchSize: 1, IntraOp: 1, InterOp: 1, RewriteHardSwish: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := s.HardSwishRewrites(); n != 0 {
		t.Errorf("%d sites reported rewritten; the model was loaded as it is", n)
	}
	if _, err := s.Run(1); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkHardSwishRewrite runs the shipped model at batch 1 as it is and rewritten, one run
// of each per iteration, alternately, so that the machine's drift falls on both alike; it
// reports each one's time per run and their ratio.
func BenchmarkHardSwishRewrite(b *testing.B) {
	initORT(b)
	var ss [2]*Session[float32]
	for i, rewrite := range []bool{false, true} {
		s, err := NewSession[float32](SessionConfig{ModelPath: defaultModel, InputName: "input", OutputName: "output",
			InputShape: []int64{3, 224, 224}, MaxBatchSize: 1, IntraOp: 1, InterOp: 1, RewriteHardSwish: rewrite})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		in := s.Input(0)
		for j := range in {
			in[j] = float32(j%255)/255*4 - 2
		}
		ss[i] = s
	}
	var took [2]time.Duration
	n := 0
	for b.Loop() {
		for k := range 2 {
			i := (n + k) % 2 // off, on; then on, off
			t0 := time.Now()
			if _, err := ss[i].Run(1); err != nil {
				b.Fatal(err)
			}
			took[i] += time.Since(t0)
		}
		n++
	}
	b.ReportMetric(float64(took[0].Microseconds())/float64(n), "µs/run-off")
	b.ReportMetric(float64(took[1].Microseconds())/float64(n), "µs/run-on")
	b.ReportMetric(float64(took[1])/float64(took[0]), "on/off")
}
