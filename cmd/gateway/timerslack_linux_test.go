//go:build linux && cgo

package main_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// wantSlack is IMAGEGATE_TIMER_SLACK_NS (timerslack_linux.go), 1 ms.
const wantSlack = 1000000

// TestTimerSlack: every thread of a gateway that has served requests (the runtime's, made
// after the constructor ran, and those made under load) carries the raised timer slack.
func TestTimerSlack(t *testing.T) {
	jpeg, err := os.ReadFile(filepath.Join(sharedDir(t), "images", "skimage_rocket.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	// A child inherits the slack of the thread that forks it, and this test binary has the
	// constructor too: the gateway is started from a thread set back to the kernel's default.
	runtime.LockOSThread() // not unlocked: the thread ends with the test's goroutine
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, 50000, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "models:\n"+defaultModelYAML(t, "{max_batch_size: 2}"))
	for range 8 {
		if a := g.do("POST", "/predict/", "image/jpeg", jpeg); a.status != 200 {
			t.Fatalf("predict: %d %s", a.status, a.body)
		}
	}
	pid := g.cmd.Process.Pid
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) < 3 {
		t.Fatalf("%d threads", len(tasks))
	}
	for _, task := range tasks {
		// A thread's own file is under /proc/TID; /proc/PID/task/TID has none.
		b, err := os.ReadFile("/proc/" + task.Name() + "/timerslack_ns")
		if err != nil {
			t.Skipf("timer slack not readable here: %v", err)
		}
		ns, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		if ns < wantSlack {
			t.Errorf("thread %s: timer slack %d ns, want at least %d", task.Name(), ns, wantSlack)
		}
	}
}
