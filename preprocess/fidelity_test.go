package preprocess

import (
	"testing"
)

// TestFidelity compares our slot with torchvision's (PIL) preprocessing of
// every photo, using goldens made by scripts/make_goldens.py.
func TestFidelity(t *testing.T) {
	d := loadGoldens(t)
	for _, e := range d.Images {
		t.Run(e.Golden, func(t *testing.T) {
			data := e.input(t)
			want := e.pixels(t)
			p := mustNew(t, e.options())
			got := make([]byte, p.SlotLen())
			if err := p.ProcessUint8(data, got); err != nil {
				t.Fatal(err)
			}
			mean, mx := diff(got, want)
			t.Logf("%-44s mean|Δ| %.5f  max|Δ| %.4f", e.Golden, mean, mx)
			if mean > 0.01 {
				t.Errorf("%s: mean |Δ| %.5f > 0.01 against torchvision", e.Name, mean)
			}
		})
	}
}

// TestFidelityFullDecode: without DCT scaling the whole pipeline is
// bit-identical to torchvision on every golden.
func TestFidelityFullDecode(t *testing.T) {
	d := loadGoldens(t)
	for _, e := range d.Images {
		t.Run(e.Golden, func(t *testing.T) {
			data := e.input(t)
			want := e.pixels(t)
			o := e.options()
			o.FullDecode = true
			p := mustNew(t, o)
			got := make([]byte, p.SlotLen())
			if err := p.ProcessUint8(data, got); err != nil {
				t.Fatal(err)
			}
			if mean, mx := diff(got, want); mx != 0 {
				t.Errorf("%s: full decode differs from torchvision: mean|Δ| %.5f max|Δ| %.4f", e.Golden, mean, mx)
			}
		})
	}
}
