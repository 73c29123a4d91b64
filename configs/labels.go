package configs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// LoadLabels reads a label file: a JSON array of strings, or one label per line. Lines that
// all start with a WordNet id, as the ONNX Model Zoo's synset.txt ("n01440764 tench, Tinca
// tinca"), give the first name after the id ("tench").
func LoadLabels(path string) ([]string, error) {
	data, err := ReadFile(path, MaxLabelBytes)
	if err != nil {
		return nil, fmt.Errorf("cannot read labels: %w", err)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var labels []string
		if err := json.Unmarshal(trimmed, &labels); err != nil {
			return nil, fmt.Errorf("cannot parse labels %s as a JSON array of strings: %w", path, err)
		}
		return labels, nil
	}
	labels := lines(string(data))
	if len(labels) == 1 && labels[0] == "" {
		return nil, fmt.Errorf("labels file %s is empty", path)
	}
	return labels, nil
}

// synsetLine is a line of a WordNet synset file: the id, then the names.
var synsetLine = regexp.MustCompile(`^n[0-9]{8} +([^,]*)`)

// lines splits a label text into its lines, without a last empty one and without the
// WordNet ids of a synset file.
func lines(s string) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimRight(s, "\r\n"), "\n") {
		out = append(out, strings.TrimRight(line, "\r"))
	}
	names := make([]string, 0, len(out))
	for _, l := range out {
		m := synsetLine.FindStringSubmatch(l)
		if m == nil {
			return out
		}
		names = append(names, strings.TrimSpace(m[1]))
	}
	return names
}

// parseLabelList reads the labels a model's metadata holds, as exporters write them: a JSON
// array of strings, a mapping from class index to name (JSON, or a Python dict's repr as
// Ultralytics writes it: {0: 'person', 1: 'bicycle'}), a Python list's repr, or one label per
// line.
func parseLabelList(v string) ([]string, error) {
	t := strings.TrimSpace(v)
	if t == "" {
		return nil, fmt.Errorf("no labels")
	}
	if t[0] != '[' && t[0] != '{' {
		if !strings.Contains(t, "\n") {
			return nil, fmt.Errorf("want a list, a mapping from index to name, or one label per line")
		}
		return lines(t), nil
	}
	p := &literal{s: t}
	labels, err := p.labels()
	if err != nil {
		return nil, err
	}
	if p.skipSpace(); p.i != len(p.s) {
		return nil, fmt.Errorf("unexpected %q after the labels", p.rest())
	}
	return labels, nil
}

// literal parses the subset of Python and JSON literals label lists are written in.
type literal struct {
	s string
	i int
}

func (p *literal) rest() string {
	r := p.s[p.i:]
	if len(r) > 20 {
		r = r[:20] + "…"
	}
	return r
}

func (p *literal) skipSpace() {
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n", p.s[p.i]) >= 0 {
		p.i++
	}
}

// next skips spaces and consumes c if it comes next.
func (p *literal) next(c byte) bool {
	p.skipSpace()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *literal) labels() ([]string, error) {
	switch {
	case p.next('['):
		var out []string
		for !p.next(']') {
			if len(out) > 0 && !p.next(',') {
				return nil, fmt.Errorf("want , or ] at %q", p.rest())
			}
			if p.next(']') { // a trailing comma
				break
			}
			s, err := p.str()
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	case p.next('{'):
		byIndex := map[int]string{}
		for !p.next('}') {
			if len(byIndex) > 0 && !p.next(',') {
				return nil, fmt.Errorf("want , or } at %q", p.rest())
			}
			if p.next('}') {
				break
			}
			k, err := p.index()
			if err != nil {
				return nil, err
			}
			if !p.next(':') {
				return nil, fmt.Errorf("want : at %q", p.rest())
			}
			s, err := p.str()
			if err != nil {
				return nil, err
			}
			if _, dup := byIndex[k]; dup {
				return nil, fmt.Errorf("class %d is named twice", k)
			}
			byIndex[k] = s
		}
		out := make([]string, len(byIndex))
		for k, s := range byIndex {
			if k < 0 || k >= len(out) {
				return nil, fmt.Errorf("the classes are not numbered 0 to %d (class %d)", len(out)-1, k)
			}
			out[k] = s
		}
		return out, nil
	}
	return nil, fmt.Errorf("want [ or { at %q", p.rest())
}

// index reads a class index: 3, or "3" / '3'.
func (p *literal) index() (int, error) {
	p.skipSpace()
	if p.i < len(p.s) && (p.s[p.i] == '"' || p.s[p.i] == '\'') {
		s, err := p.str()
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(s)
	}
	j := p.i
	for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
		j++
	}
	n, err := strconv.Atoi(p.s[p.i:j])
	if err != nil {
		return 0, fmt.Errorf("want a class index at %q", p.rest())
	}
	p.i = j
	return n, nil
}

// str reads a quoted string, single or double quotes, with the escapes Python's repr and
// JSON write.
func (p *literal) str() (string, error) {
	p.skipSpace()
	if p.i >= len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\'') {
		return "", fmt.Errorf("want a quoted label at %q", p.rest())
	}
	q := p.s[p.i]
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == q:
			p.i++
			return b.String(), nil
		case c == '\\' && p.i+1 < len(p.s):
			e := p.s[p.i+1]
			p.i += 2
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case 'x', 'u', 'U':
				n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
				if p.i+n > len(p.s) {
					return "", fmt.Errorf("a short \\%c escape", e)
				}
				r, err := strconv.ParseUint(p.s[p.i:p.i+n], 16, 32)
				if err != nil || !utf8.ValidRune(rune(r)) {
					return "", fmt.Errorf("a bad \\%c escape", e)
				}
				b.WriteRune(rune(r))
				p.i += n
			default: // \\ \' \" \/
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
			p.i++
		}
	}
	return "", fmt.Errorf("a label's quote is not closed")
}
