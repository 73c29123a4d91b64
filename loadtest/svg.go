package loadtest

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// Chart colors. Tests look for them in rendered pages, so they are fixed.
const (
	colorOK     = "#1f77b4" // successful throughput
	colorSent   = "#ff7f0e" // sent rate
	colorErr    = "#7f7f7f" // errors per second
	colorP50    = "#2ca02c"
	colorP90    = "#e6b800"
	colorP99    = "#d62728"
	colorCurve  = "#8e44ad" // latency percentile curve
	colorAxis   = "#444444"
	colorGrid   = "#e4e4e4"
	chartWidth  = 560
	chartHeight = 280
)

type series struct {
	name   string
	color  string
	dashed bool
	xs, ys []float64
}

type axis struct {
	label string
	min   float64
	max   float64
	ticks []float64
	// format turns a tick value into its label (default: compact number).
	format func(float64) string
}

// lineChart writes a standalone <svg> line chart.
func lineChart(b *strings.Builder, title string, x, y axis, ss []series) {
	const left, right, top, bottom = 62, 26, 34, 46
	pw, ph := float64(chartWidth-left-right), float64(chartHeight-top-bottom)
	if x.max <= x.min {
		x.max = x.min + 1
	}
	if y.max <= y.min {
		y.max = y.min + 1
	}
	px := func(v float64) float64 { return left + (v-x.min)/(x.max-x.min)*pw }
	py := func(v float64) float64 { return top + ph - (v-y.min)/(y.max-y.min)*ph }
	fx, fy := x.format, y.format
	if fx == nil {
		fx = compact
	}
	if fy == nil {
		fy = compact
	}

	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`,
		chartWidth, chartHeight, chartWidth, chartHeight)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="#ffffff"/>`, chartWidth, chartHeight)
	fmt.Fprintf(b, `<text x="%d" y="18" font-size="13" font-weight="bold" fill="#222">%s</text>`, left, html.EscapeString(title))
	for _, t := range y.ticks {
		yy := py(t)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`, left, yy, left+pw, yy, colorGrid)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="%s">%s</text>`, left-5, yy+4, colorAxis, fy(t))
	}
	for _, t := range x.ticks {
		xx := px(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="%s"/>`, xx, top, xx, top+ph, colorGrid)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="%s">%s</text>`, xx, top+ph+15, colorAxis, fx(t))
	}
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="%s"/>`, left, top, pw, ph, colorAxis)
	fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" fill="%s">%s</text>`, left+pw/2, chartHeight-6, colorAxis, html.EscapeString(x.label))
	fmt.Fprintf(b, `<text transform="translate(14 %.1f) rotate(-90)" text-anchor="middle" fill="%s">%s</text>`, top+ph/2, colorAxis, html.EscapeString(y.label))

	// Legend, top right.
	lx := float64(chartWidth - right)
	for i := len(ss) - 1; i >= 0; i-- {
		s := ss[i]
		w := float64(len(s.name))*6.2 + 26
		lx -= w
		fmt.Fprintf(b, `<line x1="%.1f" y1="14" x2="%.1f" y2="14" stroke="%s" stroke-width="3"/>`, lx, lx+16, s.color)
		fmt.Fprintf(b, `<text x="%.1f" y="18" fill="#222">%s</text>`, lx+20, html.EscapeString(s.name))
	}

	b.WriteString(`<g>`)
	for _, s := range ss {
		var pts strings.Builder
		for i := range s.xs {
			if math.IsNaN(s.ys[i]) || math.IsInf(s.ys[i], 0) {
				continue
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(s.xs[i]), py(min(s.ys[i], y.max)))
		}
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2.5" stroke-linejoin="round"%s points="%s"/>`,
			s.color, dash, strings.TrimSpace(pts.String()))
		if len(s.xs) <= 30 {
			for i := range s.xs {
				if math.IsNaN(s.ys[i]) || math.IsInf(s.ys[i], 0) {
					continue
				}
				fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`, px(s.xs[i]), py(min(s.ys[i], y.max)), s.color)
			}
		}
	}
	b.WriteString(`</g></svg>`)
}

// niceAxis returns an axis from 0 (or lo) to a round number >= hi with
// about five ticks.
func niceAxis(label string, lo, hi float64) axis {
	if !(hi > lo) {
		hi = lo + 1
	}
	span := hi - lo
	step := math.Pow(10, math.Floor(math.Log10(span/5)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if span/(step*m) <= 6 {
			step *= m
			break
		}
	}
	a := axis{label: label, min: math.Floor(lo/step) * step}
	a.max = math.Ceil(hi/step) * step
	for t := a.min; t <= a.max+step/2; t += step {
		a.ticks = append(a.ticks, t)
	}
	return a
}

// compact formats a tick value briefly: 1200 -> 1.2k.
func compact(v float64) string {
	switch av := math.Abs(v); {
	case av >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case av >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}

// nines maps a percentile (0..100) to the "number of nines" axis:
// 0 -> 0, 90 -> 1, 99 -> 2, 99.9 -> 3.
func nines(p float64) float64 {
	if p >= 100 {
		return math.Inf(1)
	}
	return -math.Log10(1 - p/100)
}

func ninesLabel(x float64) string {
	switch {
	case x <= 0:
		return "0%"
	case x <= 1:
		return strconv.FormatFloat((1-math.Pow(10, -x))*100, 'g', 3, 64) + "%"
	default:
		return strconv.FormatFloat((1-math.Pow(10, -x))*100, 'f', int(math.Round(x))-2, 64) + "%"
	}
}
