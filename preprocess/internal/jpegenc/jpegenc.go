// Package jpegenc writes JPEGs through libjpeg with the parameters camera and
// encoder output rarely has (sampling factors up to 4, progressive and
// arithmetic coding, restart intervals, CMYK/YCCK, RGB), so that the decoder's
// tests cover them without storing such files. Tests only.
package jpegenc

/*
#cgo LDFLAGS: -ljpeg
#include <stdio.h>
#include <stdlib.h>
#include <setjmp.h>
#include <jpeglib.h>

typedef struct {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	char msg[JMSG_LENGTH_MAX];
} jencerr;

static void jenc_exit(j_common_ptr c) {
	jencerr *e = (jencerr *)c->err;
	(*c->err->format_message)(c, e->msg);
	longjmp(e->jb, 1);
}

// jenc writes pix (w*h*nc bytes) as a JPEG into *out (malloc'd, *outlen bytes).
// cs: 0 YCbCr, 1 grayscale, 2 CMYK, 3 YCCK, 4 RGB. hs, vs: the first (and for
// 4-component files the fourth) component's sampling factors, the others 1x1.
static int jenc(const unsigned char *pix, int w, int h, int cs, int hs, int vs, int prog, int arith,
		int restart, int quality, unsigned char **out, unsigned long *outlen, char *msg) {
	struct jpeg_compress_struct ci;
	jencerr e;
	ci.err = jpeg_std_error(&e.pub);
	e.pub.error_exit = jenc_exit;
	*out = NULL;
	*outlen = 0;
	if (setjmp(e.jb)) {
		snprintf(msg, JMSG_LENGTH_MAX, "%s", e.msg);
		jpeg_destroy_compress(&ci);
		free(*out);
		*out = NULL;
		return -1;
	}
	jpeg_create_compress(&ci);
	jpeg_mem_dest(&ci, out, outlen);
	ci.image_width = w;
	ci.image_height = h;
	int nc = cs == 1 ? 1 : (cs == 2 || cs == 3) ? 4 : 3;
	ci.input_components = nc;
	ci.in_color_space = nc == 1 ? JCS_GRAYSCALE : nc == 4 ? JCS_CMYK : JCS_RGB;
	jpeg_set_defaults(&ci);
	if (cs == 3) jpeg_set_colorspace(&ci, JCS_YCCK);
	if (cs == 4) jpeg_set_colorspace(&ci, JCS_RGB);
	jpeg_set_quality(&ci, quality, TRUE);
	for (int i = 0; i < ci.num_components; i++) {
		ci.comp_info[i].h_samp_factor = 1;
		ci.comp_info[i].v_samp_factor = 1;
	}
	ci.comp_info[0].h_samp_factor = hs;
	ci.comp_info[0].v_samp_factor = vs;
	if (nc == 4) {
		ci.comp_info[3].h_samp_factor = hs;
		ci.comp_info[3].v_samp_factor = vs;
	}
	if (prog) jpeg_simple_progression(&ci);
	ci.arith_code = arith;
	ci.restart_interval = restart;
	jpeg_start_compress(&ci, TRUE);
	while (ci.next_scanline < ci.image_height) {
		JSAMPROW r = (JSAMPROW)(pix + (long)ci.next_scanline * w * nc);
		jpeg_write_scanlines(&ci, &r, 1);
	}
	jpeg_finish_compress(&ci);
	jpeg_destroy_compress(&ci);
	return 0;
}
*/
import "C"

import (
	"errors"
	"math"
	"math/rand/v2"
	"unsafe"
)

// Color spaces of the written file.
const (
	YCbCr = iota
	Gray
	CMYK
	YCCK
	RGB
)

// Params says how to write the file.
type Params struct {
	W, H        int
	ColorSpace  int // YCbCr, Gray, CMYK, YCCK, RGB
	HS, VS      int // the first component's sampling factors (1..4); the chroma ones are 1x1
	Progressive bool
	Arithmetic  bool
	Restart     int // restart interval in MCUs, 0 for none
	Quality     int // 0 means 90
}

// Components is how many components a color space has.
func Components(cs int) int {
	switch cs {
	case Gray:
		return 1
	case CMYK, YCCK:
		return 4
	}
	return 3
}

// Photo is a deterministic test picture: smooth gradients, noise and sharp
// edges, w*h*nc bytes.
func Photo(w, h, nc int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(w)<<20|uint64(h)))
	pix := make([]byte, w*h*nc)
	for y := range h {
		for x := range w {
			for k := range nc {
				v := 128 + 100*math.Sin(float64(x)*(0.013+0.02*float64(k))+float64(y)*0.021*float64(k+1))*math.Cos(float64(y)*0.007+float64(k)) +
					float64(r.IntN(40)-20)
				if (x/37+y/29)%5 == k {
					v = 255 - v
				}
				pix[(y*w+x)*nc+k] = byte(min(255, max(0, v)))
			}
		}
	}
	return pix
}

// Encode writes Photo(p.W, p.H, …) as a JPEG with parameters p.
func Encode(p Params, seed uint64) ([]byte, error) {
	if p.W <= 0 || p.H <= 0 {
		return nil, errors.New("jpegenc: empty image")
	}
	hs, vs, q := max(1, p.HS), max(1, p.VS), p.Quality
	if q == 0 {
		q = 90
	}
	pix := Photo(p.W, p.H, Components(p.ColorSpace), seed)
	var out *C.uchar
	var n C.ulong
	var msg [C.JMSG_LENGTH_MAX]C.char
	b := func(v bool) C.int {
		if v {
			return 1
		}
		return 0
	}
	if C.jenc((*C.uchar)(unsafe.Pointer(&pix[0])), C.int(p.W), C.int(p.H), C.int(p.ColorSpace), C.int(hs), C.int(vs),
		b(p.Progressive), b(p.Arithmetic), C.int(p.Restart), C.int(q), &out, &n, &msg[0]) != 0 {
		return nil, errors.New("jpegenc: " + C.GoString(&msg[0]))
	}
	defer C.free(unsafe.Pointer(out))
	return C.GoBytes(unsafe.Pointer(out), C.int(n)), nil
}
