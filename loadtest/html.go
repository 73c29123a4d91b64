package loadtest

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

const pageStyle = `body{margin:0;padding:12px 16px;font-family:sans-serif;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 4px}p.cfg{margin:0 0 8px;font-size:13px;color:#555}
.charts{display:grid;grid-template-columns:${w}px ${w}px;gap:8px 16px}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:2px 6px;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}`

func pageHead(b *strings.Builder, title string) {
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>")
	b.WriteString(html.EscapeString(title))
	b.WriteString("</title><style>")
	b.WriteString(strings.ReplaceAll(pageStyle, "${w}", fmt.Sprint(chartWidth)))
	b.WriteString("</style></head><body>\n")
}

func configLine(c *ReportConfig) string {
	mode := fmt.Sprintf("closed loop, %d workers", c.Concurrency)
	if c.Mode == "open" {
		mode = fmt.Sprintf("open loop, %g req/s %s, at most %d in flight", c.Rate, c.Arrival, c.Concurrency)
	}
	return fmt.Sprintf("%s %s — %s, keep-alive %v, timeout %gs", c.Method, c.URL, mode, c.KeepAlive, c.TimeoutS)
}

// WriteHTML writes a standalone HTML page (inline SVG, no external
// resources) with throughput and latency over time, the latency percentile
// curve and the summary.
func (r *Result) WriteHTML(w io.Writer) error {
	var b strings.Builder
	s := &r.Summary
	pageHead(&b, "loadtest report")
	fmt.Fprintf(&b, "<h1>loadtest report</h1><p class=\"cfg\">%s<br>started %s</p>\n",
		html.EscapeString(configLine(&r.Config)), r.StartTime.Format("2006-01-02 15:04:05 MST"))
	b.WriteString(`<div class="charts">`)

	// Throughput over time. Trailing seconds in which nothing was sent or scheduled only hold
	// the last completions (a partial second): they are left out of the charts.
	n := len(r.Timeline)
	for n > 1 && r.Timeline[n-1].Sent == 0 && r.Timeline[n-1].Scheduled == 0 {
		n--
	}
	ts := make([]float64, n)
	ok, sent, errs := make([]float64, n), make([]float64, n), make([]float64, n)
	p50, p90, p99 := make([]float64, n), make([]float64, n), make([]float64, n)
	var maxRate, maxLat float64
	for i, sec := range r.Timeline[:n] {
		ts[i] = float64(sec.T) + 0.5
		ok[i], sent[i], errs[i] = float64(sec.OK), float64(sec.Sent), float64(sec.Errors)
		p50[i], p90[i], p99[i] = sec.P50Ms, sec.P90Ms, sec.P99Ms
		if sec.Scheduled == 0 {
			p50[i], p90[i], p99[i] = math.NaN(), math.NaN(), math.NaN()
		}
		maxRate = max(maxRate, ok[i], sent[i], errs[i])
		maxLat = max(maxLat, sec.P99Ms)
	}
	xAxis := niceAxis("time (s)", 0, float64(max(n, 1)))
	lineChart(&b, "Throughput per second", xAxis, niceAxis("requests / s", 0, maxRate*1.05), []series{
		{name: r.Config.successName(), color: colorOK, xs: ts, ys: ok},
		{name: "sent", color: colorSent, dashed: true, xs: ts, ys: sent},
		{name: "errors", color: colorErr, xs: ts, ys: errs},
	})
	lineChart(&b, "Latency by scheduled second", xAxis, niceAxis("latency (ms)", 0, maxLat*1.05), []series{
		{name: "p50", color: colorP50, xs: ts, ys: p50},
		{name: "p90", color: colorP90, xs: ts, ys: p90},
		{name: "p99", color: colorP99, xs: ts, ys: p99},
	})

	// Percentile curve on a "nines" axis.
	var px, py []float64
	var maxNines float64
	for _, pt := range r.Percentiles {
		if pt.Percentile < 100 {
			px = append(px, nines(pt.Percentile))
			py = append(py, pt.Ms)
			maxNines = max(maxNines, px[len(px)-1])
		}
	}
	if len(r.Percentiles) > 0 { // the maximum, one step past the last percentile
		px = append(px, maxNines+0.125)
		py = append(py, r.Percentiles[len(r.Percentiles)-1].Ms)
	}
	xa := axis{label: "percentile", min: 0, max: math.Ceil(maxNines + 0.125), format: ninesLabel}
	for t := 0.0; t <= xa.max; t++ {
		xa.ticks = append(xa.ticks, t)
	}
	lineChart(&b, "Latency distribution (percentiles)", xa, niceAxis("latency (ms)", 0, s.Latency.Max*1.05), []series{
		{name: "latency", color: colorCurve, xs: px, ys: py},
	})

	// Summary table.
	b.WriteString(`<div><table><tr><th>figure</th><th>value</th></tr>`)
	row := func(k, v string) {
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td></tr>", html.EscapeString(k), html.EscapeString(v))
	}
	row("sent / completed / "+r.Config.successName(), fmt.Sprintf("%d / %d / %d", s.Sent, s.Completed, s.OK2xx))
	row("warm-up excluded", fmt.Sprint(s.Warmup))
	row("duration", fmt.Sprintf("%.3f s", s.DurationS))
	row("sent rate", fmt.Sprintf("%.1f req/s", s.SentRate))
	row("throughput ("+r.Config.successName()+")", fmt.Sprintf("%.1f req/s", s.Throughput))
	for _, p := range []struct {
		k string
		v float64
	}{{"latency p50", s.Latency.P50}, {"latency p90", s.Latency.P90}, {"latency p99", s.Latency.P99},
		{"latency p99.9", s.Latency.P999}, {"latency max", s.Latency.Max}, {"latency mean", s.Latency.Mean}} {
		row(p.k, fmtMs(p.v)+" ms")
	}
	var ek []string
	for _, k := range sortedKeys(s.ErrorKinds) {
		ek = append(ek, fmt.Sprintf("%s=%d", k, s.ErrorKinds[k]))
	}
	row("errors", fmt.Sprintf("%d %s", s.Errors, strings.Join(ek, " ")))
	row("loadtest CPU", fmt.Sprintf("%.1f %% of one core", s.CPU.Percent))
	b.WriteString("</table></div></div>\n")

	// Timeline table.
	b.WriteString(`<h2 style="font-size:15px">Per second</h2><table><tr><th>t (s)</th><th>sent</th><th>completed</th><th>` + r.Config.successName() + `</th><th>errors</th><th>scheduled</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th></tr>`)
	for _, sec := range r.Timeline {
		fmt.Fprintf(&b, "<tr><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>",
			sec.T, sec.Sent, sec.Completed, sec.OK, sec.Errors, sec.Scheduled, fmtMs(sec.P50Ms), fmtMs(sec.P90Ms), fmtMs(sec.P99Ms), fmtMs(sec.MaxMs))
	}
	b.WriteString("</table>\n</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
