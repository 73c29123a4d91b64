package gateway

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// TestRunOutputsPerSample: a batch run hands each sample its own values of every output of the
// model (the runner's per-sample shapes), whatever its place in the batch, for both input
// element types.
func TestRunOutputsPerSample(t *testing.T) {
	t.Run("float32", func(t *testing.T) { testRunOutputs(t, RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}) })
	t.Run("uint8", func(t *testing.T) { testRunOutputs(t, RunnersOf[uint8]{newFake[uint8](3*side*side, 3, 4)}) })
}

func testRunOutputs(t *testing.T, runners Runners) {
	s, err := New(testOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s.Shutdown(ctx)
	}()
	m, err := newModel(modelOpts("m", runners), s)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close(context.Background(), s.met)
	if len(m.outputs) != 2 || m.outputName != "output" || m.classes != 3 {
		t.Fatalf("outputs %v, name %q, classes %d", m.outputs, m.outputName, m.classes)
	}
	const n = 4 // one full batch
	samples := m.impl.samples(n, false)
	defer samples.release()
	vals := make([]string, 0, n*m.rowLen)
	for i := range n {
		for range m.rowLen {
			vals = append(vals, fmt.Sprint(10*(i+1)))
		}
	}
	if err := samples.tensorJSON([]byte("[" + strings.Join(vals, ",") + "]")); err != nil {
		t.Fatal(err)
	}
	if err := samples.submit(context.Background(), 0, trace.SpanContext{}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		v := float32(10 * (i + 1))
		if got, want := samples.output(i, scoresOutput), []float32{v, v + 0.001, v + 0.002}; !slices.Equal(got, want) {
			t.Errorf("sample %d: scores %v, want %v", i, got, want)
		}
		if got, want := samples.output(i, 1), []float32{v * float32(m.rowLen)}; !slices.Equal(got, want) {
			t.Errorf("sample %d: its second output %v, want %v", i, got, want)
		}
	}
}
