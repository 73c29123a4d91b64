package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/imagegate/imagegate/loadtest"
)

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressBar draws one self-overwriting line.
type progressBar struct{ w io.Writer }

func (b *progressBar) update(p loadtest.Progress) {
	const width = 30
	filled := int(p.Fraction * width)
	phase := ""
	if p.Warmup {
		phase = " warm-up"
	}
	fmt.Fprintf(b.w, "\r[%s%s] %3.0f%% %6.1fs sent %d ok %d err %d%s\x1b[K",
		strings.Repeat("=", filled), strings.Repeat(" ", width-filled), p.Fraction*100,
		p.Elapsed.Seconds(), p.Sent, p.OK, p.Errors, phase)
	if p.Done {
		fmt.Fprint(b.w, "\r\x1b[K")
	}
}
