package gateway

import (
	"os"
	"testing"

	"github.com/imagegate/imagegate/preprocess"
)

// BenchmarkBodyToSlot is the whole per-request preprocessing path on the article's payload:
// JSON body → base64 → JPEG decode → resize, crop, normalize into a float32 slot.
func BenchmarkBodyToSlot(b *testing.B) {
	body, err := os.ReadFile("../../shared/seed/rime_5868.json")
	if err != nil {
		b.Skip("../shared/seed/rime_5868.json not found:", err)
	}
	pre, err := preprocess.New(preprocess.Options{Width: 224, Height: 224, Resize: 256})
	if err != nil {
		b.Fatal(err)
	}
	slot := make([]float32, pre.SlotLen())
	var img, scratch []byte
	b.ReportAllocs()
	for b.Loop() {
		img, scratch, err = DecodeJSONImage(body, img, scratch)
		if err != nil {
			b.Fatal(err)
		}
		if err := pre.Process(img, slot); err != nil {
			b.Fatal(err)
		}
	}
}
