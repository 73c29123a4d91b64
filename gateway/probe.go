package gateway

import (
	"bytes"
	"image"
	_ "image/jpeg" // header parsing only: DecodeConfig
	_ "image/png"

	_ "golang.org/x/image/webp"

	"github.com/imagegate/imagegate/preprocess"
)

// decodeCost estimates, from an image's header, the memory its decode holds at its peak and
// whether it is heavy (a decoded size above heavyPixelBytes). A header that cannot be read
// costs little: the decode itself then fails at once, with the precise error.
func decodeCost(_ *preprocess.Preprocessor, img []byte) (int64, bool, error) {
	const unknown = 1 << 20
	cfg, _, err := image.DecodeConfig(bytes.NewReader(img))
	if err != nil {
		return unknown, false, nil
	}
	decoded := int64(cfg.Width) * int64(cfg.Height) * 4
	return min(decoded, 64<<20) + unknown, decoded > heavyPixelBytes, nil
}
