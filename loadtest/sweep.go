package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"strings"
	"time"
)

// SweepConfig describes a series of runs that differ in concurrency
// (closed loop) or rate (open loop).
type SweepConfig struct {
	// Base is the template for every step; its Concurrency (for a
	// concurrency sweep) or Rate (for a rate sweep) is replaced per step.
	// Its Requests or Duration bounds each step.
	Base Config
	// Exactly one of Concurrencies and Rates must be set.
	Concurrencies []int
	Rates         []float64
	// MetricsURL, when set, is scraped before and after every step to
	// report the server's mean batch size over the step.
	MetricsURL string
	Batch      BatchMetrics
	// OnStep, when set, is called after each step.
	OnStep func(step SweepStep)
}

// SweepStep is the outcome of one step.
type SweepStep struct {
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate,omitempty"`
	Summary     Summary `json:"results"`
	// MeanBatch is the server's mean batch size over the step (items per
	// batch), 0 without -metrics or when no batch ran.
	MeanBatch    float64 `json:"mean_batch,omitempty"`
	Batches      float64 `json:"batches,omitempty"`
	BatchSource  string  `json:"batch_source,omitempty"`
	MetricsError string  `json:"metrics_error,omitempty"`
}

// SweepResult is the outcome of a sweep.
type SweepResult struct {
	Tool      string       `json:"tool"`
	Version   int          `json:"version"`
	Kind      string       `json:"kind"` // "concurrency" or "rate"
	Config    ReportConfig `json:"config"`
	StartTime time.Time    `json:"start_time"`
	Steps     []SweepStep  `json:"steps"`
}

// Sweep runs the steps in order. It stops early, returning the steps done,
// when ctx is cancelled.
func Sweep(ctx context.Context, sc SweepConfig) (*SweepResult, error) {
	if (len(sc.Concurrencies) == 0) == (len(sc.Rates) == 0) {
		return nil, fmt.Errorf("%w: a sweep needs either concurrencies or rates", ErrConfig)
	}
	res := &SweepResult{Tool: "imagegate-loadtest", Version: 1, Kind: "concurrency", StartTime: time.Now()}
	n := len(sc.Concurrencies)
	if len(sc.Rates) > 0 {
		res.Kind, n = "rate", len(sc.Rates)
	}
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		cfg := sc.Base
		cfg.Progress = nil
		if res.Kind == "rate" {
			cfg.Rate = sc.Rates[i]
		} else {
			cfg.Concurrency, cfg.Rate = sc.Concurrencies[i], 0
		}
		var before BatchCounters
		var metricsErr error
		if sc.MetricsURL != "" {
			before, metricsErr = scrapeBatch(ctx, sc.MetricsURL, sc.Batch)
		}
		r, err := Run(ctx, cfg)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			res.Config = r.Config
		}
		step := SweepStep{Concurrency: r.Config.Concurrency, Rate: r.Config.Rate, Summary: r.Summary}
		if sc.MetricsURL != "" && metricsErr == nil {
			var after BatchCounters
			after, metricsErr = scrapeBatch(ctx, sc.MetricsURL, sc.Batch)
			if metricsErr == nil {
				step.MeanBatch = MeanBatch(before, after)
				step.Batches = after.Batches - before.Batches
				step.BatchSource = after.Source
			}
		}
		if metricsErr != nil {
			step.MetricsError = metricsErr.Error()
		}
		res.Steps = append(res.Steps, step)
		if sc.OnStep != nil {
			sc.OnStep(step)
		}
	}
	if len(res.Steps) == 0 && ctx.Err() != nil {
		return nil, errors.Join(errors.New("loadtest: sweep cancelled before its first step"), ctx.Err())
	}
	return res, nil
}

func scrapeBatch(ctx context.Context, url string, m BatchMetrics) (BatchCounters, error) {
	samples, err := Scrape(ctx, url)
	if err != nil {
		return BatchCounters{}, err
	}
	return m.ReadBatchCounters(samples)
}

// WriteJSON writes r as indented JSON.
func (r *SweepResult) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// SweepHeader is the header line of the sweep table. Its 2xx/s column counts the
// successes a second: status OK in a gRPC run.
func SweepHeader() string {
	return fmt.Sprintf("%6s %9s %10s %10s %9s %9s %9s %9s %9s %8s %7s %6s",
		"conc", "rate", "sent/s", "2xx/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "errors", "batch", "cpu%")
}

// Row formats one step as a line of the sweep table.
func (s *SweepStep) Row() string {
	rate := "-"
	if s.Rate > 0 {
		rate = fmt.Sprintf("%g", s.Rate)
	}
	batch := "-"
	if s.MeanBatch > 0 {
		batch = fmt.Sprintf("%.2f", s.MeanBatch)
	}
	l := s.Summary.Latency
	return fmt.Sprintf("%6d %9s %10.1f %10.1f %9s %9s %9s %9s %9s %8d %7s %6.1f",
		s.Concurrency, rate, s.Summary.SentRate, s.Summary.Throughput,
		fmtMs(l.P50), fmtMs(l.P90), fmtMs(l.P99), fmtMs(l.P999), fmtMs(l.Max), s.Summary.Errors, batch, s.Summary.CPU.Percent)
}

// WriteText writes the throughput-vs-latency table.
func (r *SweepResult) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Sweep over %s: %s %s\n", r.Kind, r.Config.Method, r.Config.URL)
	b.WriteString(SweepHeader() + "\n")
	for i := range r.Steps {
		b.WriteString(r.Steps[i].Row() + "\n")
	}
	for _, s := range r.Steps {
		if s.MetricsError != "" {
			fmt.Fprintf(&b, "metrics (step c=%d rate=%g): %s\n", s.Concurrency, s.Rate, s.MetricsError)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteHTML writes a standalone page with the latency-vs-throughput curve
// and the table.
func (r *SweepResult) WriteHTML(w io.Writer) error {
	var b strings.Builder
	pageHead(&b, "loadtest sweep")
	fmt.Fprintf(&b, "<h1>loadtest sweep over %s</h1><p class=\"cfg\">%s %s, started %s</p>\n",
		r.Kind, html.EscapeString(r.Config.Method), html.EscapeString(r.Config.URL), r.StartTime.Format("2006-01-02 15:04:05 MST"))
	var xs, p50, p99 []float64
	var maxX, maxY float64
	for _, s := range r.Steps {
		xs = append(xs, s.Summary.Throughput)
		p50 = append(p50, s.Summary.Latency.P50)
		p99 = append(p99, s.Summary.Latency.P99)
		maxX = max(maxX, s.Summary.Throughput)
		maxY = max(maxY, s.Summary.Latency.P99)
	}
	b.WriteString(`<div class="charts">`)
	lineChart(&b, "Latency vs throughput", niceAxis("throughput (2xx req/s)", 0, maxX*1.05), niceAxis("latency (ms)", 0, maxY*1.05), []series{
		{name: "p50", color: colorP50, xs: xs, ys: p50},
		{name: "p99", color: colorP99, xs: xs, ys: p99},
	})
	b.WriteString("<div></div></div>\n<table><tr><th>concurrency</th><th>rate</th><th>sent/s</th><th>2xx/s</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>max ms</th><th>errors</th><th>mean batch</th><th>cpu %</th></tr>")
	for _, s := range r.Steps {
		l := s.Summary.Latency
		rate, batch := "-", "-"
		if s.Rate > 0 {
			rate = fmt.Sprintf("%g", s.Rate)
		}
		if s.MeanBatch > 0 {
			batch = fmt.Sprintf("%.2f", s.MeanBatch)
		}
		fmt.Fprintf(&b, "<tr><td>%d</td><td>%s</td><td>%.1f</td><td>%.1f</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d</td><td>%s</td><td>%.1f</td></tr>",
			s.Concurrency, rate, s.Summary.SentRate, s.Summary.Throughput, fmtMs(l.P50), fmtMs(l.P90), fmtMs(l.P99), fmtMs(l.P999), fmtMs(l.Max),
			s.Summary.Errors, batch, s.Summary.CPU.Percent)
	}
	b.WriteString("</table>\n</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
