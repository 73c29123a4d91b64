//go:build linux

package main_test

import (
	"sync"
	"testing"

	"github.com/imagegate/imagegate/internal/testutil"
)

// threadNices counts the threads of process pid by niceness.
func threadNices(t *testing.T, pid int) map[int]int {
	t.Helper()
	nices, err := testutil.ThreadNices(pid)
	if err != nil {
		t.Fatal(err)
	}
	return nices
}

// TestModelRunsOutrankDecodes: in the shipped config, the threads that run the model are at
// niceness 2, one per instance, and the threads that decoded images at 5; the rest (accept,
// refuse, answer) stay at 0. With decodes and model runs at the same niceness, the one model
// thread got 2/3 of a CPU against two decode threads, and at c=8 decoded images waited for it
// while the decode workers idled (gateway/internal/sched).
func TestModelRunsOutrankDecodes(t *testing.T) {
	g := startGateway(t, shippedConfig(t, nil))
	img := rocket(t)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 5 {
				if a := g.do("POST", "/predict/", "image/jpeg", img); a.status != 200 {
					t.Errorf("status %d: %s", a.status, a.body)
				}
			}
		})
	}
	wg.Wait()
	instances := int(g.metric("gateway_model_instances", ""))
	if instances < 1 {
		t.Fatalf("gateway_model_instances is %d", instances)
	}
	nices := threadNices(t, g.cmd.Process.Pid)
	if nices[2] != instances {
		t.Errorf("%d threads at niceness 2, want one per model instance (%d); all: %v", nices[2], instances, nices)
	}
	if nices[5] < 1 {
		t.Errorf("no decode thread at niceness 5; all: %v", nices)
	}
	if nices[0] < 1 {
		t.Errorf("no thread left at niceness 0; all: %v", nices)
	}
	for n, c := range nices {
		if n != 0 && n != 2 && n != 5 {
			t.Errorf("%d threads at niceness %d; all: %v", c, n, nices)
		}
	}
}
