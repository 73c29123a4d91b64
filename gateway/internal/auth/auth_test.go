package auth

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

func writeKeys(t testing.TB, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func sum(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

const keyA, keyB = "tenant-a-0123456789abcdef", "tenant-b-0123456789abcdef"

func twoTenants() string {
	return fmt.Sprintf(`defaults: {rate: 100, max_inflight: 8}
keys:
  - name: a
    sha256: %s
    models: [m1]
    rate: 2
    burst: 3
  - name: b
    key: %s
    max_inflight: 0
`, sum(keyA), keyB)
}

// TestLookupAndScope: a key is found by the key itself (given in clear or as its digest),
// not by its digest, a prefix or another key; it carries its models and limits, the
// defaults where it sets none.
func TestLookupAndScope(t *testing.T) {
	s, err := Open(writeKeys(t, twoTenants()), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := s.Lookup([]byte(keyA)), s.Lookup([]byte(keyB))
	if a == nil || a.Name() != "a" || b == nil || b.Name() != "b" {
		t.Fatalf("lookup: %v %v", a, b)
	}
	for _, wrong := range []string{"", sum(keyA), keyA[:len(keyA)-1], keyA + "x", strings.ToUpper(keyA)} {
		if k := s.Lookup([]byte(wrong)); k != nil {
			t.Errorf("%q found key %s", wrong, k.Name())
		}
	}
	if !a.Allows("m1") || a.Allows("m2") || a.AllModels() || !b.Allows("anything") || !b.AllModels() {
		t.Error("model scopes")
	}
	if l := a.Limits(); l.Rate != 2 || l.Burst != 3 || l.MaxInflight != 8 {
		t.Errorf("a's limits %+v: want rate 2, burst 3, the default max_inflight 8", l)
	}
	if l := b.Limits(); l.Rate != 100 || l.Burst != 100 || l.MaxInflight != 0 {
		t.Errorf("b's limits %+v: want the default rate 100 (burst 100) and no in-flight bound", l)
	}
}

// TestKeyFileErrors: every problem of a key file is reported, each naming its field, and no
// error quotes a key.
func TestKeyFileErrors(t *testing.T) {
	secret := "a-secret-that-is-long-enough"
	text := fmt.Sprintf(`keys:
  - {name: "", key: %s}
  - {name: "bad name", key: short}
  - {name: dup, sha256: nothex}
  - {name: dup, key: %s, rate: -1, burst: 0, max_inflight: -2}
  - {name: both, key: %s, sha256: %s}
  - {name: same, key: %s, models: []}
`, secret, secret+"2", secret+"3", sum(secret), secret)
	_, err := Open(writeKeys(t, text), nil)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"keys[0].name", "keys[1].name", "keys[1] (bad name).key: must be at least 16", "keys[2] (dup).sha256",
		`keys[3].name: "dup" is also keys[2]'s`, "keys[3] (dup).rate", "keys[3] (dup).burst", "keys[3] (dup).max_inflight",
		"keys[4] (both): give sha256 or key", "keys[5] (same): is the same key as keys[0]", "keys[5] (same).models: is empty"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("an error quotes a key:\n%v", err)
	}
	for text, want := range map[string]string{
		"":           "is empty",
		"keys: []\n": "at least one key",
		"keyz: []\n": "field keyz not found",
		"keys:\n  - {name: x, key: " + secret + ", ratee: 1}\n": "field ratee not found",
	} {
		if _, err := Open(writeKeys(t, text), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}

// TestRateLimit: a burst of Burst requests passes, the next is refused with the wait until a
// token comes, and at the rate's pace requests pass again; a key without a rate is not
// limited.
func TestRateLimit(t *testing.T) {
	s, err := Open(writeKeys(t, twoTenants()), nil)
	if err != nil {
		t.Fatal(err)
	}
	a := s.Lookup([]byte(keyA)) // rate 2/s, burst 3
	now := time.Unix(1000, 0)
	for i := range 3 {
		if r, _ := a.Admit(now); r != Admitted {
			t.Fatalf("request %d of the burst: %v", i, r)
		}
		a.Done()
	}
	if r, _ := a.Check(now); r != RateLimited {
		t.Fatalf("Check after the burst: %v", r)
	}
	r, wait := a.Admit(now)
	if r != RateLimited || wait != 500*time.Millisecond {
		t.Fatalf("after the burst: %v, wait %v; want rate, 500ms", r, wait)
	}
	if r, wait := a.Admit(now.Add(200 * time.Millisecond)); r != RateLimited || wait != 300*time.Millisecond {
		t.Fatalf("200 ms later: %v, wait %v; want 300ms", r, wait)
	}
	if r, _ := a.Admit(now.Add(500 * time.Millisecond)); r != Admitted {
		t.Fatalf("once a token came: %v", r)
	}
	a.Done()
	// From 0.51 s to 10.5 s at 2/s: 20 more pass (at 1 s, 1.5 s, ... 10.5 s), whatever is asked.
	passed := 0
	for ms := 510; ms <= 10500; ms += 10 {
		if r, _ := a.Admit(now.Add(time.Duration(ms) * time.Millisecond)); r == Admitted {
			passed++
			a.Done()
		}
	}
	if passed != 20 {
		t.Fatalf("%d passed in 10 s at 2/s, want 20", passed)
	}
	b := s.Lookup([]byte(keyB)) // rate 100, burst 100, no in-flight bound
	for i := range 100 {
		if r, _ := b.Admit(now); r != Admitted {
			t.Fatalf("b's request %d: %v", i, r)
		}
	}
	if b.Inflight() != 100 {
		t.Fatalf("b in flight: %d", b.Inflight())
	}
}

// TestInflightLimit: MaxInflight requests at once; the next is refused until one is done;
// a refusal takes no token.
func TestInflightLimit(t *testing.T) {
	s, err := Open(writeKeys(t, fmt.Sprintf("keys:\n  - {name: c, key: %s, max_inflight: 2, rate: 1, burst: 3}\n", keyA)), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := s.Lookup([]byte(keyA))
	now := time.Unix(1000, 0)
	c.Admit(now)
	c.Admit(now)
	if r, _ := c.Check(now); r != InflightLimited {
		t.Fatalf("Check: %v", r)
	}
	if r, wait := c.Admit(now); r != InflightLimited || wait != 0 {
		t.Fatalf("third: %v %v", r, wait)
	}
	c.Done()
	if r, _ := c.Admit(now); r != Admitted {
		t.Fatalf("after one is done: %v (the in-flight refusal took a token?)", r)
	}
}

// TestConcurrentAdmit: from many goroutines at one instant, exactly Burst requests pass.
func TestConcurrentAdmit(t *testing.T) {
	s, err := Open(writeKeys(t, fmt.Sprintf("keys:\n  - {name: c, key: %s, rate: 10, burst: 50}\n", keyA)), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := s.Lookup([]byte(keyA))
	now := time.Unix(1000, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	passed := 0
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if r, _ := c.Admit(now); r == Admitted {
					mu.Lock()
					passed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if passed != 50 {
		t.Fatalf("%d passed, want the burst of 50", passed)
	}
}

// TestReloadKeepsStateAndRefusesBadFiles: a reload keeps a key's bucket, requests in flight
// and counters by its name, takes new limits and keys, drops removed keys; a bad file leaves
// the keys in use, reported once.
func TestReloadKeepsStateAndRefusesBadFiles(t *testing.T) {
	set := metrics.NewSet()
	p := writeKeys(t, twoTenants())
	s, err := Open(p, set)
	if err != nil {
		t.Fatal(err)
	}
	a := s.Lookup([]byte(keyA))
	now := time.Now()
	for range 3 {
		a.Admit(now)
	}
	a.Count(200)
	a.Count(429)
	a.Count(299) // other
	os.WriteFile(p, []byte(strings.Replace(twoTenants(), "models: [m1]", "models: [m1, m2]", 1)), 0o600)
	if changed, err := s.Reload(); !changed || err != nil {
		t.Fatalf("reload: %v %v", changed, err)
	}
	a2 := s.Lookup([]byte(keyA))
	if a2 == a || !a2.Allows("m2") || a2.Inflight() != 3 {
		t.Fatalf("after the reload: allows m2 %v, in flight %d (want 3, kept)", a2.Allows("m2"), a2.Inflight())
	}
	if r, _ := a2.Admit(now); r != RateLimited {
		t.Fatalf("the bucket emptied before the reload is full again: %v", r)
	}
	a.Done() // a request admitted before the reload ends after it
	if a2.Inflight() != 2 {
		t.Fatalf("in flight %d after one ended", a2.Inflight())
	}
	for _, bad := range []string{"keys: [", "keys:\n  - {name: a, key: short}\n"} {
		os.WriteFile(p, []byte(bad), 0o600)
		if changed, err := s.Reload(); changed || err == nil {
			t.Fatalf("%q: %v %v", bad, changed, err)
		}
		if changed, err := s.Reload(); changed || err != nil {
			t.Fatalf("%q again: %v %v; want nothing new", bad, changed, err)
		}
		if s.Lookup([]byte(keyB)) == nil {
			t.Fatal("the keys in use were dropped")
		}
	}
	os.WriteFile(p, []byte(fmt.Sprintf("keys:\n  - {name: b, key: %s}\n", keyB)), 0o600)
	if changed, err := s.Reload(); !changed || err != nil {
		t.Fatal(changed, err)
	}
	if s.Lookup([]byte(keyA)) != nil || s.Len() != 1 {
		t.Fatal("a removed key still works")
	}
	var b bytes.Buffer
	set.WritePrometheus(&b)
	for _, want := range []string{`gateway_key_requests_total{key="a",code="200"} 1`, `gateway_key_requests_total{key="a",code="429"} 1`,
		`gateway_key_requests_total{key="a",code="other"} 1`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), keyA) {
		t.Error("a key is in the metrics")
	}
}

// TestAdmitAllocatesNothing: looking a key up, admitting, counting and finishing allocate
// nothing once the counter exists.
func TestAdmitAllocatesNothing(t *testing.T) {
	s, err := Open(writeKeys(t, twoTenants()), metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	presented := []byte(keyB)
	s.Lookup(presented).Count(200)
	allocs := testing.AllocsPerRun(1000, func() {
		k := s.Lookup(presented)
		if r, _ := k.Admit(time.Now()); r == Admitted {
			k.Done()
		}
		k.Count(200)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations", allocs)
	}
}

// BenchmarkLookup: the constant-time lookup among n keys.
func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{10, 1000} {
		var text strings.Builder
		text.WriteString("keys:\n")
		for i := range n {
			fmt.Fprintf(&text, "  - {name: k%d, sha256: %s}\n", i, sum(fmt.Sprintf("key-number-%08d", i)))
		}
		s, err := Open(writeKeys(b, text.String()), nil)
		if err != nil {
			b.Fatal(err)
		}
		presented := []byte(fmt.Sprintf("key-number-%08d", n/2))
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if s.Lookup(presented) == nil {
					b.Fatal("not found")
				}
			}
		})
	}
}
