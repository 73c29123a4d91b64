package preprocess

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkJPEGDecodeAlone: the article's photo decoded by libjpeg-turbo as the gateway
// decodes it (the DCT scale and the window of rows and columns the crop reads, default
// options: shorter side 256, crop 224), and nothing else: no resampling, no normalization.
// The decode's part of the physical limit `make bench` reports (bench/run.sh, "The limit");
// cpu-µs/image is this thread's CPU time, which other processes on the machine do not add to.
func BenchmarkJPEGDecodeAlone(b *testing.B) {
	data := seedJPEG(b)
	p := mustNew(b, Options{})
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	decode := func() (jpegPlan, jpegWindow) {
		s := getScratch()
		defer putScratch(s)
		d := jpegDecoders.Get().(*jpegDecoder)
		defer jpegDecoders.Put(d)
		if err := d.open(data); err != nil {
			b.Fatal(err)
		}
		defer d.close()
		pl, err := p.jpegHeader(d, data)
		if err != nil {
			b.Fatal(err)
		}
		win := p.jpegWindow(&pl)
		if _, err := p.decodeJPEGWindow(d, &pl, &win, s); err != nil {
			b.Fatal(err)
		}
		return pl, win
	}
	pl, win := decode()
	b.Logf("%dx%d decoded at scale %d/8 (%dx%d), window %d columns x %d rows", pl.w, pl.h, pl.num, pl.sw, pl.sh, win.cw, win.y1-win.y0)
	b.ReportAllocs()
	cpu0 := threadCPU()
	for b.Loop() {
		decode()
	}
	b.ReportMetric(float64((threadCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/image")
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
