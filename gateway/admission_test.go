package gateway

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/imagegate/imagegate/batcher"
	"github.com/imagegate/imagegate/gateway/internal/admit"
)

// TestLIFOSpike: under server.queue_discipline lifo, a line longer than the floor is a spike. A
// request that waited for a decode worker past its model's queue target is then dropped when a
// worker frees up: 503 queue_full with X-Refusal: expired, counted in
// gateway_decode_expired_total, not among the refusals at the door. A request arriving during
// the spike with a predicted wait over a quarter of the target is refused at the door at once
// (X-Refusal: queue_time), and its answer's latency is counted in
// gateway_refusal_duration_seconds.
func TestLIFOSpike(t *testing.T) {
	o := testOptions()
	o.DecodeWorkers, o.DecodeQueue, o.QueueDiscipline = 1, 200, "lifo"
	mo := modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)})
	mo.QueueTarget = 50 * time.Millisecond
	ts := newTestServer(t, o, mo)
	img := solidPNG(t, 16, 16, 9)
	gate := ts.s.adm.Gate
	// The decode time the gate predicts with: 1 ms.
	if err := gate.Acquire(context.Background(), time.Now().Add(time.Hour), 0, 0, false, 0); err != nil {
		t.Fatal(err)
	}
	gate.Release(0, false, time.Millisecond)
	// The one decode worker is busy; a request waits for it.
	if err := gate.Acquire(context.Background(), time.Now().Add(time.Hour), 0, 0, false, 0); err != nil {
		t.Fatal(err)
	}
	waited := make(chan reply, 1)
	go func() { waited <- ts.do("POST", "/models/m/predict", "image/png", img) }()
	for w, _ := gate.Stats(); w == 0; w, _ = gate.Stats() {
		time.Sleep(time.Millisecond)
	}
	// A spike: more than the floor in line (requests reading their bodies).
	var tickets []admit.Ticket
	for range admit.Floor + 1 {
		tickets = append(tickets, gate.Admitted(time.Now()))
	}
	defer func() {
		for _, tk := range tickets {
			gate.Arrived(tk)
		}
	}()
	door := ts.do("POST", "/models/m/predict", "image/png", img)
	if door.status != 503 || door.header["X-Refusal"] != "queue_time" || door.header["Retry-After"] == "" {
		t.Fatalf("a request arriving in a spike, predicted to wait %v: %d %v %s", gate.QueueWait(), door.status, door.header, door.body)
	}
	time.Sleep(mo.QueueTarget + 10*time.Millisecond)
	gate.Release(0, false, 0) // the waiter, past its target in a spike, is dropped
	r := <-waited
	if r.status != 503 || r.header["X-Refusal"] != "expired" || r.header["Retry-After"] == "" {
		t.Fatalf("a request that waited past its target in a spike: %d %v %s", r.status, r.header, r.body)
	}
	for series, want := range map[string]float64{
		`gateway_decode_expired_total{reason="queue_target"}`:                       1,
		`gateway_refusals_total{stage="queue_time"}`:                                1,
		`gateway_refusal_duration_seconds_count`:                                    1,
		`gateway_request_failures_total{model="m",version="1",reason="queue_full"}`: 2,
	} {
		if v := ts.metric(series); v != want {
			t.Errorf("%s = %v, want %v", series, v, want)
		}
	}
}

// TestLifecycle: the server's phases move forward only, through advance; readiness is the
// ready phase with a model served; a listener given once a drain has begun is closed at once.
func TestLifecycle(t *testing.T) {
	s, err := New(testOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.phase() != phaseStarting || s.ready() {
		t.Fatalf("a new server: phase %d, ready %v", s.phase(), s.ready())
	}
	if err := s.AddModel(modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)})); err != nil {
		t.Fatal(err)
	}
	if s.phase() != phaseReady || !s.ready() {
		t.Fatalf("with a model: phase %d, ready %v", s.phase(), s.ready())
	}
	if err := s.UnloadModel("m"); err != nil {
		t.Fatal(err)
	}
	if s.phase() != phaseReady || s.ready() {
		t.Fatalf("every model unloaded: phase %d, ready %v; want the ready phase, not ready", s.phase(), s.ready())
	}
	var seen []phase
	for _, p := range []phase{phaseDraining, phaseReady, phaseClosing, phaseClosing, phaseAborting, phaseStopped, phaseDraining} {
		if s.advance(p) {
			seen = append(seen, p)
		}
	}
	if want := []phase{phaseDraining, phaseClosing, phaseAborting, phaseStopped}; !slices.Equal(seen, want) {
		t.Fatalf("transitions taken %v, want %v", seen, want)
	}
	if s.life.abort.Err() == nil {
		t.Fatal("aborting did not cancel the requests' context")
	}
	select {
	case <-s.life.stop:
	default:
		t.Fatal("closing did not tell the streams to stop")
	}
	if err := s.AddModel(modelOpts("n", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)})); err == nil {
		t.Fatal("a model was added to a stopped server")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.Shutdown(ctx)
}

// TestQueueBoundAtTheDoor: max_queue_size counts the samples waiting beyond those running, and
// the door holds it. With a sample held in the batcher's queue by the batch window and
// max_queue_size 1, the next request is refused at the door, before its body (no "100
// Continue"), not by the batcher once its body was read and decoded.
func TestQueueBoundAtTheDoor(t *testing.T) {
	mo := modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 2)})
	mo.Batching = batcher.Config{MaxBatchSize: 2, MaxQueueSize: 1, MaxQueueDelay: 500 * time.Millisecond}
	ts := newTestServer(t, testOptions(), mo)
	img := solidPNG(t, 8, 8, 40)
	first := make(chan reply, 1)
	go func() { first <- ts.do("POST", "/models/m/predict", "image/png", img) }()
	waitUntil(t, func() bool { return ts.metric(`gateway_queue_length{model="m",version="1"}`) == 1 })
	if r := ts.do("POST", "/models/m/predict", "image/png", img); r.status != 503 || !strings.Contains(string(r.body), "max_queue_size") {
		t.Errorf("a request beyond max_queue_size: %d %s", r.status, r.body)
	}
	c, err := ts.ln.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST /models/m/predict HTTP/1.1\r\nHost: gw\r\nContent-Type: image/png\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", len(img))
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 503 {
		t.Errorf("Expect: 100-continue beyond max_queue_size: %v %v", resp, err)
	}
	if r := <-first; r.status != 200 {
		t.Errorf("the sample in the window: %d %s", r.status, r.body)
	}
	for series, want := range map[string]float64{
		`gateway_refusals_total{stage="queue"}`:                                  2,
		`gateway_queue_dropped_total{model="m",version="1",reason="queue_full"}`: 0, // the batcher's
	} {
		if v := ts.metric(series); v != want {
			t.Errorf("%s = %v, want %v", series, v, want)
		}
	}
}
