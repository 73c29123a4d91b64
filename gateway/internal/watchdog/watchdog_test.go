package watchdog

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestBoundFollowsTypicalRun: the bound is MaxRun before a first run, then RunMultiple times
// the typical run within [MinHang, MaxRun]; failed runs do not count in the typical run.
func TestBoundFollowsTypicalRun(t *testing.T) {
	d := New(Options{RunMultiple: 10, MinHang: 50 * time.Millisecond, MaxRun: time.Second}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var r Runs
	r.Init(2)
	if b := d.Bound(&r); b != time.Second {
		t.Fatalf("bound before a run: %v, want MaxRun", b)
	}
	r.End(0, time.Hour, false)
	r.End(0, 20*time.Millisecond, true)
	if b := d.Bound(&r); b != 200*time.Millisecond {
		t.Fatalf("bound after a 20ms run: %v, want 200ms", b)
	}
	r.End(1, time.Millisecond, true) // typical 20ms + (1ms-20ms)/8
	if typ := r.Typical(); typ != 20*time.Millisecond-19*time.Millisecond/8 {
		t.Fatalf("typical run %v", typ)
	}
	r.typical.Store(int64(time.Microsecond))
	if b := d.Bound(&r); b != 50*time.Millisecond {
		t.Fatalf("bound of a fast model: %v, want MinHang", b)
	}
}

// TestCheckFailsLivenessWhileARunHangs: a run past its bound fails liveness, names its model
// and counts once; its end restores liveness.
func TestCheckFailsLivenessWhileARunHangs(t *testing.T) {
	d := New(Options{RunMultiple: 2, MinHang: 10 * time.Millisecond, MaxRun: time.Second}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	hung := 0
	r := &Runs{Model: "m", Version: "3", OnHung: func() { hung++ }}
	r.Init(2)
	d.Add(r)
	now := time.Now()
	r.Begin(1, now)
	d.Check(now.Add(500 * time.Millisecond))
	if live, _ := d.Live(); !live {
		t.Fatal("not live while a run is within its bound")
	}
	for range 2 {
		d.Check(now.Add(2 * time.Second))
	}
	live, why := d.Live()
	if live || hung != 1 || !strings.Contains(why, "model m version 3") || !strings.Contains(why, "instance 1") {
		t.Fatalf("hung run: live %v, counted %d, why %q", live, hung, why)
	}
	r.End(1, 2*time.Second, false)
	d.Check(now.Add(3 * time.Second))
	if live, _ := d.Live(); !live {
		t.Fatal("not live after the hung run ended")
	}
	d.Remove(r)
	d.Run()
	d.Close()
}
