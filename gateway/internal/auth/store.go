package auth

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
	"go.yaml.in/yaml/v3"
)

// MinKeyLength is the shortest key a key file may give in clear (key:); keys given by their
// SHA-256 cannot be checked, and should be as long (128 bits of randomness or more).
const MinKeyLength = 16

// maxFile bounds a key file.
const maxFile = 16 << 20

// Store is the key file's keys, reloadable. Safe for concurrent use.
type Store struct {
	path string
	set  *metrics.Set // per-key series; nil: none
	cur  atomic.Pointer[table]

	mu      sync.Mutex           // Reload
	states  map[string]*keyState // by name, across reloads (under mu)
	refused [sha256.Size]byte    // the contents last refused, not reported again
}

// table is one reading of the key file.
type table struct {
	digest [sha256.Size]byte
	sums   [][sha256.Size]byte // the keys' SHA-256, index-aligned with keys
	keys   []*Key
}

// Open reads the key file at path; per-key request counters go to set (nil: none).
func Open(path string, set *metrics.Set) (*Store, error) {
	s := &Store{path: path, set: set, states: map[string]*keyState{}}
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	t, err := s.parse(b)
	if err != nil {
		return nil, err
	}
	s.cur.Store(t)
	return s, nil
}

// Path is the key file's path.
func (s *Store) Path() string { return s.path }

// Len is the number of keys.
func (s *Store) Len() int { return len(s.cur.Load().keys) }

// Names lists the keys' names, in the file's order.
func (s *Store) Names() []string {
	var out []string
	for _, k := range s.cur.Load().keys {
		out = append(out, k.name)
	}
	return out
}

// Reload reads the key file again and installs it when it changed and is valid (changed
// true). A file that cannot be read or parsed leaves the keys in use; err says why, once for
// the same contents.
func (s *Store) Reload() (changed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := readFile(s.path)
	if err != nil {
		return false, s.refuse(sha256.Sum256([]byte(err.Error())), err)
	}
	d := sha256.Sum256(b)
	if d == s.cur.Load().digest {
		s.refused = [sha256.Size]byte{}
		return false, nil
	}
	t, err := s.parseLocked(b)
	if err != nil {
		return false, s.refuse(d, err)
	}
	s.refused = [sha256.Size]byte{}
	s.cur.Store(t)
	return true, nil
}

func (s *Store) refuse(d [sha256.Size]byte, err error) error {
	if d == s.refused {
		return nil
	}
	s.refused = d
	return err
}

// Lookup returns the key whose SHA-256 is presented's, or nil. Every key's digest is compared,
// each in constant time, whatever matches: how long it takes tells nothing of which key (or
// whether any) matched, and what is compared is a digest, never the key.
func (s *Store) Lookup(presented []byte) *Key {
	if len(presented) == 0 {
		return nil
	}
	t := s.cur.Load()
	h := sha256.Sum256(presented)
	h0, h1 := binary.LittleEndian.Uint64(h[0:]), binary.LittleEndian.Uint64(h[8:])
	h2, h3 := binary.LittleEndian.Uint64(h[16:]), binary.LittleEndian.Uint64(h[24:])
	found := 0
	for i := range t.sums {
		d := &t.sums[i]
		v := h0 ^ binary.LittleEndian.Uint64(d[0:]) | h1 ^ binary.LittleEndian.Uint64(d[8:]) |
			h2 ^ binary.LittleEndian.Uint64(d[16:]) | h3 ^ binary.LittleEndian.Uint64(d[24:])
		eq := int(((v | -v) >> 63) ^ 1) // 1 when v == 0, without a branch
		found = subtle.ConstantTimeSelect(eq, i+1, found)
	}
	if found == 0 {
		return nil
	}
	return t.keys[found-1]
}

// The key file, as YAML.
type fileYAML struct {
	Defaults limitsYAML `yaml:"defaults"`
	Keys     []keyYAML  `yaml:"keys"`
}

type limitsYAML struct {
	Rate        *float64 `yaml:"rate"`
	Burst       *int     `yaml:"burst"`
	MaxInflight *int     `yaml:"max_inflight"`
}

type keyYAML struct {
	Name       string   `yaml:"name"`
	SHA256     string   `yaml:"sha256"`
	Key        string   `yaml:"key"`
	Models     []string `yaml:"models"`
	limitsYAML `yaml:",inline"`
}

func (s *Store) parse(b []byte) (*table, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.parseLocked(b)
}

// parseLocked parses and checks the file, reporting every problem, each naming its field.
func (s *Store) parseLocked(b []byte) (*table, error) {
	var f fileYAML
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("auth: %s is empty", s.path)
		}
		// yaml's messages quote at most a key name or a line number, never a value.
		return nil, fmt.Errorf("auth: cannot parse %s: %w", s.path, err)
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	defaults := Limits{}
	defaults.apply(f.Defaults, "defaults", bad)
	if len(f.Keys) == 0 {
		bad("keys", "at least one key is needed")
	}
	t := &table{digest: sha256.Sum256(b)}
	names, sums := map[string]int{}, map[[sha256.Size]byte]int{}
	for i, ky := range f.Keys {
		field := fmt.Sprintf("keys[%d]", i)
		if !validName(ky.Name) {
			bad(field+".name", "must be 1 to 64 letters, digits, '.', '_' or '-' (it labels metrics and log lines)")
		} else if j, dup := names[ky.Name]; dup {
			bad(field+".name", "%q is also keys[%d]'s", ky.Name, j)
		}
		names[ky.Name] = i
		field = fmt.Sprintf("keys[%d] (%s)", i, ky.Name)
		var sum [sha256.Size]byte
		switch {
		case ky.SHA256 != "" && ky.Key != "":
			bad(field, "give sha256 or key, not both")
		case ky.SHA256 != "":
			d, err := hex.DecodeString(strings.TrimPrefix(strings.ToLower(ky.SHA256), "sha256:"))
			if err != nil || len(d) != sha256.Size {
				bad(field+".sha256", "must be 64 hexadecimal digits (sha256sum of the key)")
			}
			copy(sum[:], d)
		case len(ky.Key) < MinKeyLength:
			bad(field+".key", "must be at least %d characters (or give its sha256)", MinKeyLength)
		default:
			sum = sha256.Sum256([]byte(ky.Key))
		}
		if j, dup := sums[sum]; dup && sum != ([sha256.Size]byte{}) {
			bad(field, "is the same key as keys[%d]", j)
		}
		sums[sum] = i
		k := &Key{name: ky.Name, lim: defaults}
		k.lim.apply(ky.limitsYAML, field, bad)
		if ky.Models != nil {
			if len(ky.Models) == 0 {
				bad(field+".models", "is empty: omit it for every model")
			}
			k.models = map[string]bool{}
			for _, m := range ky.Models {
				if m == "" || strings.ContainsAny(m, "/ ") {
					bad(field+".models", "%q is not a model name", m)
				}
				k.models[m] = true
			}
		}
		t.sums = append(t.sums, sum)
		t.keys = append(t.keys, k)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("auth: %s: %w", s.path, err)
	}
	for _, k := range t.keys {
		st := s.states[k.name]
		if st == nil {
			st = &keyState{}
			if s.set != nil {
				st.counts = newCounters(s.set, k.name)
			}
			s.states[k.name] = st
		}
		k.st = st
		k.lim.finish()
	}
	return t, nil
}

// validName: 1 to 64 bytes of letters, digits, '.', '_', '-'.
func validName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for _, c := range []byte(n) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// apply sets the limits y gives, checking them.
func (l *Limits) apply(y limitsYAML, field string, bad func(string, string, ...any)) {
	if y.Rate != nil {
		if r := *y.Rate; r < 0 || math.IsNaN(r) || r > 1e6 {
			bad(field+".rate", "must be in [0, 1000000] requests per second (0: no limit), got %v", r)
		} else {
			l.Rate = r
		}
	}
	if y.Burst != nil {
		if b := *y.Burst; b < 1 || b > 1e6 {
			bad(field+".burst", "must be in [1, 1000000], got %d", b)
		} else {
			l.Burst = b
		}
	}
	if y.MaxInflight != nil {
		if n := *y.MaxInflight; n < 0 || n > 1e6 {
			bad(field+".max_inflight", "must be in [0, 1000000] (0: no limit), got %d", n)
		} else {
			l.MaxInflight = n
		}
	}
}

// readFile reads a regular file of at most maxFile bytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("auth: %s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, fmt.Errorf("auth: %s: %w", path, err)
	}
	if len(b) > maxFile {
		return nil, fmt.Errorf("auth: %s holds more than %d bytes", path, maxFile)
	}
	return b, nil
}
