package preprocess

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"
)

// pngSpec describes a PNG written by makePNG: any color type, bit depth and
// interlace method (Go's encoder writes neither Adam7 nor every depth).
type pngSpec struct {
	w, h      int
	colorType int // 0, 2, 3, 4, 6
	depth     int
	interlace bool
	plte      [][3]uint8 // palette (color type 3)
	trns      []byte     // raw tRNS chunk data, written when non-nil
	// sample returns sample c of pixel (x, y), at most 1<<depth - 1. Nil
	// writes zeros (the most compressible image data: a "bomb").
	sample func(x, y, c int) uint16
	level  int // zlib level; 0 means zlib.BestSpeed
}

func pngChunk(b *bytes.Buffer, typ string, data []byte) {
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(data)))
	copy(hdr[4:], typ)
	b.Write(hdr[:])
	b.Write(data)
	crc := crc32.NewIEEE()
	crc.Write(hdr[4:])
	crc.Write(data)
	binary.BigEndian.PutUint32(hdr[:4], crc.Sum32())
	b.Write(hdr[:4])
}

// adam7 are the seven passes: x0, y0, dx, dy.
var adam7 = [7][4]int{{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4}, {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}}

// makePNG encodes s (filter type None on every row, one IDAT chunk).
func makePNG(tb testing.TB, s pngSpec) []byte {
	tb.Helper()
	var out bytes.Buffer
	out.Write(pngMagic)
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr, uint32(s.w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(s.h))
	ihdr[8], ihdr[9] = byte(s.depth), byte(s.colorType)
	if s.interlace {
		ihdr[12] = 1
	}
	pngChunk(&out, "IHDR", ihdr)
	if len(s.plte) > 0 {
		var p []byte
		for _, c := range s.plte {
			p = append(p, c[:]...)
		}
		pngChunk(&out, "PLTE", p)
	}
	if s.trns != nil {
		pngChunk(&out, "tRNS", s.trns)
	}
	ch := (&pngHeader{colorType: s.colorType}).channels()
	level := s.level
	if level == 0 {
		level = zlib.BestSpeed
	}
	var idat bytes.Buffer
	z, err := zlib.NewWriterLevel(&idat, level)
	if err != nil {
		tb.Fatal(err)
	}
	passes := [][4]int{{0, 0, 1, 1}}
	if s.interlace {
		passes = adam7[:]
	}
	var row []byte
	for _, ps := range passes {
		pw := (s.w - ps[0] + ps[2] - 1) / ps[2]
		if ps[0] >= s.w {
			pw = 0
		}
		if pw == 0 {
			continue
		}
		bits := pw * ch * s.depth
		n := 1 + (bits+7)/8
		if cap(row) < n {
			row = make([]byte, n)
		}
		row = row[:n]
		for y := ps[1]; y < s.h; y += ps[3] {
			clear(row)
			if s.sample != nil {
				bit := 8 // bit offset in row
				for i := range pw {
					x := ps[0] + i*ps[2]
					for c := range ch {
						v := s.sample(x, y, c)
						switch s.depth {
						case 16:
							row[bit/8], row[bit/8+1] = byte(v>>8), byte(v)
						case 8:
							row[bit/8] = byte(v)
						default:
							row[bit/8] |= byte(v) << (8 - s.depth - bit%8)
						}
						bit += s.depth
					}
				}
			}
			if _, err := z.Write(row); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := z.Close(); err != nil {
		tb.Fatal(err)
	}
	pngChunk(&out, "IDAT", idat.Bytes())
	pngChunk(&out, "IEND", nil)
	return out.Bytes()
}

// pngVariantSpecs are PNGs of every color type, bit depth and interlace
// method, with palettes and tRNS, in a w x h size, with smooth contents.
func pngVariantSpecs(w, h int) map[string]pngSpec {
	smooth := func(depth int) func(x, y, c int) uint16 {
		mx := 1<<depth - 1
		return func(x, y, c int) uint16 {
			v := (x*(3+c) + y*(5-c)) * mx / (3*w + 5*h)
			return uint16(v)
		}
	}
	pal := make([][3]uint8, 200)
	for i := range pal {
		pal[i] = [3]uint8{uint8(i), uint8(255 - i), uint8(i * 7)}
	}
	specs := map[string]pngSpec{}
	for _, il := range []bool{false, true} {
		name := map[bool]string{false: "", true: "-adam7"}[il]
		for _, d := range []int{1, 2, 4, 8, 16} {
			specs[fmt.Sprintf("gray%d%s", d, name)] = pngSpec{w: w, h: h, colorType: 0, depth: d, interlace: il, sample: smooth(d)}
		}
		specs["gray8-trns"+name] = pngSpec{w: w, h: h, colorType: 0, depth: 8, interlace: il, sample: smooth(8), trns: []byte{0, 7}}
		specs["gray16-trns"+name] = pngSpec{w: w, h: h, colorType: 0, depth: 16, interlace: il, sample: smooth(16), trns: []byte{1, 7}}
		for _, d := range []int{8, 16} {
			specs[fmt.Sprintf("rgb%d%s", d, name)] = pngSpec{w: w, h: h, colorType: 2, depth: d, interlace: il, sample: smooth(d)}
			specs[fmt.Sprintf("ga%d%s", d, name)] = pngSpec{w: w, h: h, colorType: 4, depth: d, interlace: il, sample: smooth(d)}
			specs[fmt.Sprintf("rgba%d%s", d, name)] = pngSpec{w: w, h: h, colorType: 6, depth: d, interlace: il, sample: smooth(d)}
		}
		specs["rgb8-trns"+name] = pngSpec{w: w, h: h, colorType: 2, depth: 8, interlace: il, sample: smooth(8), trns: []byte{0, 1, 0, 2, 0, 3}}
		for _, d := range []int{1, 2, 4, 8} {
			n := min(1<<d, len(pal))
			specs[fmt.Sprintf("pal%d%s", d, name)] = pngSpec{w: w, h: h, colorType: 3, depth: d, interlace: il, plte: pal[:n],
				sample: func(x, y, c int) uint16 { return uint16((x + 3*y) % n) }}
		}
		// Indices past the palette's end (black, as image/png has it) and tRNS.
		specs["pal8-short-trns"+name] = pngSpec{w: w, h: h, colorType: 3, depth: 8, interlace: il, plte: pal[:50], trns: []byte{0, 128, 255},
			sample: func(x, y, c int) uint16 { return uint16((x + y) % 70) }}
	}
	return specs
}
