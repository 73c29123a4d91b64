package console

import (
	"bytes"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Snapshot is what GET /ui/api/snapshot answers: the gateway's own series at one instant,
// per model version and for the whole server, named as in docs/metrics.md without the
// gateway_ prefix. Counters are cumulative and histograms' buckets cumulative, as exposed:
// the page takes differences between snapshots (rates, the last minute's batch sizes,
// percentiles over a window).
type Snapshot struct {
	Time       float64 `json:"time"` // the server's clock, Unix milliseconds
	Version    string  `json:"version"`
	Listener   string  `json:"listener"`   // "admin" or "public": where this page is served
	Repository string  `json:"repository"` // the repository API here: "open", "token" (needs the admin token) or "none"
	Authorized bool    `json:"authorized"` // the request may use the repository API (no token needed, or it sent the right one)
	Server     Series  `json:"server"`
	Unknown    Series  `json:"unknown"`          // requests for models or versions that are not served
	Process    Series  `json:"process,omitzero"` // the process's CPU seconds and resident memory (ReadProcess)
	Models     []Model `json:"models"`
}

// Model is one model version: its state in the repository and its series (none when it is
// not loaded).
type Model struct {
	Name      string `json:"name"`
	Version   string `json:"version"`
	State     string `json:"state"`            // READY, LOADING or UNAVAILABLE, as the repository index says
	Reason    string `json:"reason,omitempty"` // only to an authorized request: it can name files
	Default   bool   `json:"default,omitempty"`
	Newest    bool   `json:"newest,omitempty"` // the version a request without one gets
	Instances int    `json:"instances,omitempty"`
	// Stats are the version's statistics (Triton's extension, as GET .../stats answers
	// them): executions per batch size, the served requests' summed times.
	Stats any `json:"stats,omitempty"`
	Series
}

// Series are the samples of one model version (or of the server): plain values by family,
// families with one more label by that label's value, histograms by family.
type Series struct {
	Values map[string]float64            `json:"values,omitempty"`
	By     map[string]map[string]float64 `json:"by,omitempty"`
	Hist   map[string]*Histogram         `json:"hist,omitempty"`
}

// Histogram is a Prometheus histogram: cumulative counts at each upper bound Le (ascending),
// and a last one for +Inf.
type Histogram struct {
	Le     []float64 `json:"le"`
	Counts []float64 `json:"counts"` // len(Le)+1
	Sum    float64   `json:"sum"`
	Count  float64   `json:"count"`

	bounds [][2]float64 // while parsing: (le, count)
	inf    float64
	hasInf bool
}

// processSeries are the process metrics a snapshot keeps (the rest of the process and Go
// runtime exposition is not the console's).
var processSeries = map[string]string{
	"process_cpu_seconds_total":     "cpu_seconds_total",
	"process_resident_memory_bytes": "resident_memory_bytes",
}

// sample is one exposition line.
type sample struct {
	name   string
	labels [][2]string
	value  float64
}

// Parse reads a Prometheus text exposition (the gateway's series, and optionally the
// process's) into s: gateway_* families with model and version labels into s.Models (one
// per pair, sorted by name and version; model "_unknown" into s.Unknown), the other
// gateway_* families into s.Server, the process's CPU and memory into s.Process. Lines it
// cannot read, and values that are not finite, are skipped.
func Parse(expo []byte, s *Snapshot) {
	samples := make([]sample, 0, bytes.Count(expo, []byte("\n")))
	for line := range bytes.Lines(expo) {
		if !bytes.HasPrefix(line, []byte("gateway_")) && !bytes.HasPrefix(line, []byte("process_")) {
			continue // comments, and the series a snapshot does not keep
		}
		if sm, ok := parseLine(line); ok {
			samples = append(samples, sm)
		}
	}
	models := map[[2]string]*Model{}
	// Histograms first: a family with _bucket series takes its _sum and _count.
	hists := map[string]bool{}
	for _, sm := range samples {
		if base, ok := strings.CutSuffix(sm.name, "_bucket"); ok && hasLabel(sm.labels, "le") {
			hists[base] = true
		}
	}
	for _, sm := range samples {
		var dst *Series
		var extra [][2]string
		switch model, version, rest, ok := split(sm.labels); {
		case processSeries[sm.name] != "":
			s.Process.set(processSeries[sm.name], nil, sm.value)
			continue
		case !strings.HasPrefix(sm.name, "gateway_"):
			continue
		case ok && model == "_unknown":
			dst, extra = &s.Unknown, rest
		case ok:
			m := models[[2]string{model, version}]
			if m == nil {
				m = &Model{Name: model, Version: version}
				models[[2]string{model, version}] = m
			}
			dst, extra = &m.Series, rest
		default:
			dst, extra = &s.Server, sm.labels
		}
		name := strings.TrimPrefix(sm.name, "gateway_")
		if base, ok := strings.CutSuffix(sm.name, "_bucket"); ok && hists[base] {
			dst.bucket(strings.TrimPrefix(base, "gateway_"), extra, sm.value)
			continue
		}
		if base, ok := strings.CutSuffix(sm.name, "_sum"); ok && hists[base] {
			dst.hist(strings.TrimPrefix(base, "gateway_")).Sum = sm.value
			continue
		}
		if base, ok := strings.CutSuffix(sm.name, "_count"); ok && hists[base] {
			dst.hist(strings.TrimPrefix(base, "gateway_")).Count = sm.value
			continue
		}
		dst.set(name, extra, sm.value)
	}
	s.Models = s.Models[:0]
	for _, m := range models {
		for _, h := range m.Hist {
			h.sort()
		}
		s.Models = append(s.Models, *m)
	}
	for _, h := range s.Server.Hist {
		h.sort()
	}
	for _, h := range s.Unknown.Hist {
		h.sort()
	}
	SortModels(s.Models)
}

// SortModels orders models by name, then by version (numerically where both are numbers).
func SortModels(ms []Model) {
	sort.Slice(ms, func(i, j int) bool {
		a, b := ms[i], ms[j]
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		x, errX := strconv.ParseUint(a.Version, 10, 64)
		y, errY := strconv.ParseUint(b.Version, 10, 64)
		if errX == nil && errY == nil {
			return x < y
		}
		return a.Version < b.Version
	})
}

// split finds a series' model and version labels; rest are its other labels.
func split(labels [][2]string) (model, version string, rest [][2]string, ok bool) {
	var hasModel, hasVersion bool
	for _, l := range labels {
		switch l[0] {
		case "model":
			model, hasModel = l[1], true
		case "version":
			version, hasVersion = l[1], true
		default:
			rest = append(rest, l)
		}
	}
	return model, version, rest, hasModel && hasVersion
}

func hasLabel(labels [][2]string, name string) bool {
	for _, l := range labels {
		if l[0] == name {
			return true
		}
	}
	return false
}

// set records a sample: a plain value, or one of a family by its other labels' values.
func (s *Series) set(name string, labels [][2]string, v float64) {
	if len(labels) == 0 {
		if s.Values == nil {
			s.Values = map[string]float64{}
		}
		s.Values[name] = v
		return
	}
	vals := make([]string, len(labels))
	for i, l := range labels {
		vals[i] = l[1]
	}
	if s.By == nil {
		s.By = map[string]map[string]float64{}
	}
	if s.By[name] == nil {
		s.By[name] = map[string]float64{}
	}
	s.By[name][strings.Join(vals, ",")] = v
}

func (s *Series) hist(name string) *Histogram {
	if s.Hist == nil {
		s.Hist = map[string]*Histogram{}
	}
	h := s.Hist[name]
	if h == nil {
		h = &Histogram{}
		s.Hist[name] = h
	}
	return h
}

// bucket records a histogram bucket's cumulative count; +Inf is kept as the last count.
func (s *Series) bucket(name string, labels [][2]string, v float64) {
	h := s.hist(name)
	for _, l := range labels {
		if l[0] != "le" {
			continue
		}
		if l[1] == "+Inf" {
			h.inf = v
			h.hasInf = true
			return
		}
		le, err := strconv.ParseFloat(l[1], 64)
		if err != nil || math.IsInf(le, 0) || math.IsNaN(le) {
			return
		}
		h.bounds = append(h.bounds, [2]float64{le, v})
	}
}

// sort puts the buckets in order of their bounds and the +Inf count last.
func (h *Histogram) sort() {
	sort.Slice(h.bounds, func(i, j int) bool { return h.bounds[i][0] < h.bounds[j][0] })
	h.Le, h.Counts = make([]float64, 0, len(h.bounds)), make([]float64, 0, len(h.bounds)+1)
	for _, b := range h.bounds {
		h.Le = append(h.Le, b[0])
		h.Counts = append(h.Counts, b[1])
	}
	inf := h.Count
	if h.hasInf {
		inf = h.inf
	}
	h.Counts = append(h.Counts, inf)
	h.bounds = nil
}

// parseLine reads `name{k="v",...} value [timestamp]`; comments and blank lines are not
// samples.
func parseLine(line []byte) (sample, bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] == '#' {
		return sample{}, false
	}
	var sm sample
	i := bytes.IndexAny(line, "{ ")
	if i <= 0 {
		return sample{}, false
	}
	sm.name = string(line[:i])
	rest := line[i:]
	if rest[0] == '{' {
		labels, after, ok := parseLabels(rest[1:])
		if !ok {
			return sample{}, false
		}
		sm.labels, rest = labels, after
	}
	fields := bytes.Fields(rest)
	if len(fields) == 0 {
		return sample{}, false
	}
	v, err := strconv.ParseFloat(string(fields[0]), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return sample{}, false
	}
	sm.value = v
	return sm, true
}

// parseLabels reads `k="v",k2="v2"}` (escapes \\, \" and \n in values) and returns what
// follows the closing brace.
func parseLabels(b []byte) (labels [][2]string, rest []byte, ok bool) {
	for {
		b = bytes.TrimLeft(b, " ,")
		if len(b) == 0 {
			return nil, nil, false
		}
		if b[0] == '}' {
			return labels, b[1:], true
		}
		eq := bytes.IndexByte(b, '=')
		if eq <= 0 || eq+1 >= len(b) || b[eq+1] != '"' {
			return nil, nil, false
		}
		key := string(bytes.TrimSpace(b[:eq]))
		b = b[eq+2:]
		if j := bytes.IndexByte(b, '"'); j >= 0 && bytes.IndexByte(b[:j], '\\') < 0 {
			// No escape (the usual case): the value as it is.
			labels = append(labels, [2]string{key, string(b[:j])})
			b = b[j+1:]
			continue
		}
		var val strings.Builder
		closed := false
		for j := 0; j < len(b); j++ {
			c := b[j]
			if c == '\\' && j+1 < len(b) {
				j++
				switch b[j] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(b[j])
				}
				continue
			}
			if c == '"' {
				b, closed = b[j+1:], true
				break
			}
			val.WriteByte(c)
		}
		if !closed {
			return nil, nil, false
		}
		labels = append(labels, [2]string{key, val.String()})
	}
}
