package gateway

import (
	"github.com/imagegate/imagegate/preprocess"
)

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
