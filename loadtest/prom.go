package loadtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// PromSample is one sample line of the Prometheus text exposition format.
type PromSample struct {
	Name   string
	Labels map[string]string // nil when the line has no labels
	Value  float64
}

// ErrPromSyntax is wrapped by every Prometheus text parse error.
var ErrPromSyntax = errors.New("loadtest: bad Prometheus text")

// ParsePrometheus parses the Prometheus text exposition format (version
// 0.0.4): comment and blank lines are skipped, timestamps are ignored, label
// values may hold escaped quotes, backslashes and newlines.
func ParsePrometheus(r io.Reader) ([]PromSample, error) {
	var out []PromSample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for lineNo := 1; sc.Scan(); lineNo++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parsePromLine(line)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d %q: %v", ErrPromSyntax, lineNo, line, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cannot read Prometheus text: %w", err)
	}
	return out, nil
}

func isNameChar(c byte, first bool) bool {
	return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || !first && '0' <= c && c <= '9'
}

func parsePromLine(line string) (PromSample, error) {
	var s PromSample
	i := 0
	for i < len(line) && isNameChar(line[i], i == 0) {
		i++
	}
	if i == 0 {
		return s, errors.New("no metric name")
	}
	s.Name = line[:i]
	rest := strings.TrimLeft(line[i:], " \t")
	if strings.HasPrefix(rest, "{") {
		labels, n, err := parsePromLabels(rest)
		if err != nil {
			return s, err
		}
		s.Labels = labels
		rest = rest[n:]
	}
	fields := strings.Fields(rest)
	if len(fields) < 1 || len(fields) > 2 {
		return s, errors.New("want a value and an optional timestamp")
	}
	v, err := parsePromValue(fields[0])
	if err != nil {
		return s, err
	}
	s.Value = v
	return s, nil
}

// parsePromLabels parses `{a="x",b="y"}` at the start of s and returns the
// labels and the number of bytes consumed.
func parsePromLabels(s string) (map[string]string, int, error) {
	labels := map[string]string{}
	i := 1
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i < len(s) && s[i] == '}' {
			return labels, i + 1, nil
		}
		j := i
		for j < len(s) && isNameChar(s[j], j == i) {
			j++
		}
		if j == i {
			return nil, 0, errors.New("bad label name")
		}
		name := s[i:j]
		for j < len(s) && s[j] == ' ' {
			j++
		}
		if j >= len(s) || s[j] != '=' {
			return nil, 0, fmt.Errorf("label %s: want =", name)
		}
		j++
		for j < len(s) && s[j] == ' ' {
			j++
		}
		if j >= len(s) || s[j] != '"' {
			return nil, 0, fmt.Errorf("label %s: want a quoted value", name)
		}
		j++
		var val strings.Builder
		for {
			if j >= len(s) {
				return nil, 0, fmt.Errorf("label %s: unterminated value", name)
			}
			c := s[j]
			if c == '"' {
				j++
				break
			}
			if c == '\\' && j+1 < len(s) {
				j++
				switch s[j] {
				case 'n':
					val.WriteByte('\n')
				default: // \\ and \"
					val.WriteByte(s[j])
				}
				j++
				continue
			}
			val.WriteByte(c)
			j++
		}
		labels[name] = val.String()
		for j < len(s) && s[j] == ' ' {
			j++
		}
		if j < len(s) && s[j] == ',' {
			j++
		}
		i = j
	}
}

func parsePromValue(f string) (float64, error) {
	switch f {
	case "+Inf", "Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	case "NaN":
		return math.NaN(), nil
	}
	v, err := strconv.ParseFloat(f, 64)
	if err != nil {
		return 0, fmt.Errorf("bad value %q", f)
	}
	return v, nil
}

// SumMetric returns the sum of name's samples across all label sets and
// whether any sample had that name.
func SumMetric(samples []PromSample, name string) (float64, bool) {
	var sum float64
	found := false
	for _, s := range samples {
		if s.Name == name {
			sum += s.Value
			found = true
		}
	}
	return sum, found
}

// BatchMetrics names the metrics the mean batch size is computed from: a
// pair of counters (batches, items) or, when those are absent, a histogram
// of batch sizes whose _sum and _count serve as items and batches.
type BatchMetrics struct {
	CountMetric string // default gateway_batches_total
	ItemsMetric string // default gateway_batch_items_total
	Histogram   string // default gateway_batch_size
}

func (m BatchMetrics) withDefaults() BatchMetrics {
	if m.CountMetric == "" {
		m.CountMetric = "gateway_batches_total"
	}
	if m.ItemsMetric == "" {
		m.ItemsMetric = "gateway_batch_items_total"
	}
	if m.Histogram == "" {
		m.Histogram = "gateway_batch_size"
	}
	return m
}

// BatchCounters are the cumulative batch and item counts at one scrape.
type BatchCounters struct {
	Batches, Items float64
	Source         string // the metric names they came from
}

// ReadBatchCounters finds the batch counters in samples, preferring the
// counter pair over the histogram.
func (m BatchMetrics) ReadBatchCounters(samples []PromSample) (BatchCounters, error) {
	m = m.withDefaults()
	b, okB := SumMetric(samples, m.CountMetric)
	it, okI := SumMetric(samples, m.ItemsMetric)
	if okB && okI {
		return BatchCounters{Batches: b, Items: it, Source: m.ItemsMetric + " / " + m.CountMetric}, nil
	}
	hs, okS := SumMetric(samples, m.Histogram+"_sum")
	hc, okC := SumMetric(samples, m.Histogram+"_count")
	if okS && okC {
		return BatchCounters{Batches: hc, Items: hs, Source: m.Histogram + "_sum / _count"}, nil
	}
	return BatchCounters{}, fmt.Errorf("cannot find batch metrics: neither %s and %s nor %s_sum and %s_count (set -batch-count-metric / -batch-items-metric)",
		m.CountMetric, m.ItemsMetric, m.Histogram, m.Histogram)
}

// MeanBatch returns the mean batch size between two scrapes, or 0 when no
// batch ran in between.
func MeanBatch(before, after BatchCounters) float64 {
	db := after.Batches - before.Batches
	if db <= 0 {
		return 0
	}
	return (after.Items - before.Items) / db
}

// Scrape fetches and parses a Prometheus text endpoint.
func Scrape(ctx context.Context, url string) ([]PromSample, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("cannot scrape %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("cannot scrape %s: status %s", url, resp.Status)
	}
	return ParsePrometheus(io.LimitReader(resp.Body, 64<<20))
}
