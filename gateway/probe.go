package gateway

import (
	"github.com/imagegate/imagegate/preprocess"
)

// heavyPixelBytes is the decode work (preprocess's Info.WorkBytes: width × height × bytes per
// pixel of the RGB or gray rows it makes, plus a TIFF's per-strip overhead) above which an
// image is heavy: 48 MiB, a 16-megapixel RGB photo. A 7000x7000 GIF screen around a 1x1
// frame, or a 1-bit palette PNG of 50 megapixels, is heavy though its stored pixels are not.
const heavyPixelBytes = 48 << 20

// decodeCost reads an image's header and returns the memory its decode holds at its peak
// (preprocess's PeakBytes: the budget to take before decoding) and whether it is heavy (its
// decode work, preprocess's WorkBytes, above heavyPixelBytes: such decodes may use half the
// workers only). A header the decoder would refuse is refused here,
// before any worker or memory is taken.
func decodeCost(pre *preprocess.Preprocessor, img []byte) (int64, bool, error) {
	info, err := pre.Probe(img)
	if err != nil {
		return 0, false, err
	}
	return info.PeakBytes, info.WorkBytes > heavyPixelBytes, nil
}
