package gateway

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestServersLeaveNothing: two servers in one process, each on a loopback TCP listener with a
// model, answer requests (images decoded on decode threads, batches run on model threads, the
// client-gone watcher and the connection tracker at work, a refused body drained and one
// lingering close), then shut down. Afterwards no goroutine of theirs is left (goleak), and no
// thread of the process is left at a niceness the servers set (a decode, heavy-decode or model
// thread that outlived its Server).
func TestServersLeaveNothing(t *testing.T) {
	leakOpts := []goleak.Option{
		goleak.IgnoreCurrent(),
		// fasthttp's clock for the Date header: one goroutine for the whole process, started
		// by the first Serve, not a server's.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	}
	img := solidPNG(t, 32, 32, 50)
	type running struct {
		s      *Server
		addr   string
		served chan error
	}
	var servers []running
	for range 2 {
		s, err := New(testOptions(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.AddModel(modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)})); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		r := running{s: s, addr: ln.Addr().String(), served: make(chan error, 1)}
		go func() { r.served <- s.Serve(ln) }()
		servers = append(servers, r)
	}
	client := &http.Client{Transport: &http.Transport{}}
	post := func(addr, path, ct string, body []byte) int {
		resp, err := client.Post("http://"+addr+path, ct, bytes.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	var wg sync.WaitGroup
	for _, r := range servers {
		for range 4 {
			wg.Go(func() {
				for range 5 {
					if st := post(r.addr, "/predict/", "image/png", img); st != 200 {
						t.Errorf("predict: %d", st)
					}
				}
				if st := post(r.addr, "/models/nope/predict", "image/png", bytes.Repeat([]byte("x"), 300<<10)); st != 404 {
					t.Errorf("refused body: %d", st)
				}
			})
		}
	}
	wg.Wait()
	// A body over max_body_bytes: answered 413, the connection closed by lingering.
	if st := post(servers[0].addr, "/predict/", "image/png", bytes.Repeat([]byte("y"), 2<<20)); st != 413 {
		t.Errorf("oversize body: %d", st)
	}
	client.CloseIdleConnections()
	for _, r := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := r.s.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		cancel()
		if err := <-r.served; err != nil {
			t.Error(err)
		}
	}
	// fasthttp's worker-pool cleaner sleeps 10 s (its MaxIdleWorkerDuration) between passes
	// and returns at the first wake after Serve has stopped: wait for it.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := goleak.Find(leakOpts...)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	checkNoServerThreads(t)
}
