package preprocess

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"slices"
	"testing"
)

// TestDecodeStopsWhenTheContextEnds: ProcessContext stops a JPEG or PNG decode once its context
// ends, with the context's cause: a decode found the stop flag set at libjpeg's first progress
// call (while it reads the scans, or the first scanline) and at libspng's first batch of rows;
// a context ended before the call stops every format before any decoding. A live context gives
// the same bits as Process.
func TestDecodeStopsWhenTheContextEnds(t *testing.T) {
	p := mustNew(t, Options{Width: 32, Height: 32, Resize: 40})
	m := image.NewRGBA(image.Rect(0, 0, 300, 200))
	for i := range m.Pix {
		m.Pix[i] = uint8(i * 7)
	}
	var j, pn, pni bytes.Buffer
	if err := jpeg.Encode(&j, m, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(&pn, m); err != nil {
		t.Fatal(err)
	}
	gray := image.NewGray(image.Rect(0, 0, 300, 200))
	gray.Set(3, 3, color.Gray{200})
	if err := png.Encode(&pni, gray); err != nil {
		t.Fatal(err)
	}
	progressive := eobScansJPEG(512, 512, 10)
	for _, c := range []struct {
		name string
		data []byte
	}{{"jpeg", j.Bytes()}, {"progressive jpeg", progressive}, {"png", pn.Bytes()}, {"gray png", pni.Bytes()}} {
		row := make([]float32, p.SlotLen())
		stop := int32(1)
		if err := p.run(c.data, sink{f32: row}, &stop); !errors.Is(err, errStopped) {
			t.Errorf("%s with the stop flag set: %v; want stopped", c.name, err)
		}
		want := make([]float32, p.SlotLen())
		if err := p.Process(c.data, want); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := p.ProcessContext(context.Background(), c.data, row); err != nil || !slices.Equal(row, want) {
			t.Errorf("%s: ProcessContext with a live context: %v, same bits %v", c.name, err, slices.Equal(row, want))
		}
		ctx, cancel := context.WithCancel(context.Background())
		live := make([]float32, p.SlotLen())
		if err := p.ProcessContext(ctx, c.data, live); err != nil || !slices.Equal(live, want) {
			t.Errorf("%s: ProcessContext with a cancelable context: %v, same bits %v", c.name, err, slices.Equal(live, want))
		}
		cancel()
		cause := errors.New("the client left")
		ctx, cancelCause := context.WithCancelCause(context.Background())
		cancelCause(cause)
		if err := p.ProcessContext(ctx, c.data, row); !errors.Is(err, cause) {
			t.Errorf("%s: ProcessContext after its context ended: %v; want the cause", c.name, err)
		}
	}
	// The pooled decoders work after a stop.
	row := make([]float32, p.SlotLen())
	if err := p.Process(j.Bytes(), row); err != nil {
		t.Fatal(err)
	}
}
