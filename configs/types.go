package configs

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written in YAML as a Go duration string ("2ms", "1.5s").
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML accepts "250us", "2ms", "1s"; a bare 0 means zero.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a duration such as \"2ms\"", n.Line)
	}
	if n.Value == "0" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: cannot parse duration %q (want e.g. \"2ms\", \"1s\")", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// ByteSize is a size in bytes, written as a number or with a KiB/MiB/GiB (or KB/MB/GB) suffix.
type ByteSize int64

// UnmarshalYAML accepts 1048576, "1MiB", "512KiB", "16MB"; "" is 0.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a size such as \"16MiB\"", n.Line)
	}
	s := strings.TrimSpace(n.Value)
	if s == "" { // unset, as 0: the key's default
		*b = 0
		return nil
	}
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: cannot parse size %q (want e.g. 1048576 or \"16MiB\")", n.Line, n.Value)
	}
	if v > math.MaxInt64/mult {
		return fmt.Errorf("line %d: size %q is too large (at most 8 EiB)", n.Line, n.Value)
	}
	*b = ByteSize(v * mult)
	return nil
}

// MarshalYAML writes the size with the largest binary suffix that divides it: "16MiB".
func (b ByteSize) MarshalYAML() (any, error) {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && int64(b)%u.mult == 0 {
			return strconv.FormatInt(int64(b)/u.mult, 10) + u.suffix, nil
		}
	}
	return int64(b), nil
}

// isZeroScalar reports whether a YAML scalar spells zero: 0, 0.0, 0s, 0ms, 0B, 0MiB...
func isZeroScalar(v string) bool {
	num := strings.TrimRightFunc(strings.TrimSpace(v), unicode.IsLetter)
	if num == "" {
		return false
	}
	f, err := strconv.ParseFloat(num, 64)
	return err == nil && f == 0
}

// BatchSize is batching.max_batch_size: a number of images, or auto (the zero value, also
// what an omitted key means), chosen when the model loads from its run time measured at
// several batch sizes on the machine it runs on (cmd/gateway, runtime/ort's batch curve).
type BatchSize int

// AutoBatchSize is max_batch_size: auto.
const AutoBatchSize BatchSize = 0

// Auto reports whether the size is chosen when the model loads.
func (b BatchSize) Auto() bool { return b == AutoBatchSize }

func (b BatchSize) String() string {
	if b.Auto() {
		return "auto"
	}
	return strconv.Itoa(int(b))
}

// UnmarshalYAML accepts a whole number or "auto".
func (b *BatchSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a number of images or auto", n.Line)
	}
	if strings.TrimSpace(n.Value) == "auto" {
		*b = AutoBatchSize
		return nil
	}
	v, err := strconv.Atoi(strings.TrimSpace(n.Value))
	if err != nil {
		return fmt.Errorf("line %d: cannot parse max_batch_size %q (want a number of images or auto)", n.Line, n.Value)
	}
	*b = BatchSize(v)
	return nil
}

// MarshalYAML writes the number, or auto.
func (b BatchSize) MarshalYAML() (any, error) {
	if b.Auto() {
		return "auto", nil
	}
	return int(b), nil
}
