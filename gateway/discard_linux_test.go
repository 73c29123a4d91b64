//go:build linux

package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestDrainedBodiesAreDiscardedInTheKernel: over TCP, the bodies of requests answered without
// reading them (an unknown model here; a refusal under load takes the same drain) are dropped
// in the kernel (recv with MSG_TRUNC), not copied, and never one byte past their end: each
// body is made of request lines, so a drain that read too far or too little would answer
// requests that were never sent, and the pipelined requests after each body get their own
// answers, in order.
func TestDrainedBodiesAreDiscardedInTheKernel(t *testing.T) {
	ts := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go ts.s.Serve(tcp)
	c, err := net.Dial("tcp", tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))

	fake := "GET /v2/health/ready HTTP/1.1\r\nHost: gw\r\n\r\n"
	big := strings.Repeat(fake, 900<<10/len(fake)) // under max_body_bytes (1 MiB)
	img := solidPNG(t, 20, 10, 100)
	var req strings.Builder
	fmt.Fprintf(&req, "POST /models/nope/predict HTTP/1.1\r\nHost: gw\r\nContent-Type: image/png\r\nContent-Length: %d\r\n\r\n%s", len(big), big)
	fmt.Fprintf(&req, "POST /models/m/predict HTTP/1.1\r\nHost: gw\r\nContent-Type: image/png\r\nContent-Length: %d\r\n\r\n%s", len(img), img)
	fmt.Fprintf(&req, "POST /models/nope/predict HTTP/1.1\r\nHost: gw\r\nContent-Type: image/png\r\nTransfer-Encoding: chunked\r\n\r\n")
	for range 2 {
		fmt.Fprintf(&req, "%x\r\n%s\r\n", len(big)/2, big[:len(big)/2])
	}
	req.WriteString("0\r\n\r\n")
	req.WriteString("GET /v2/health/live HTTP/1.1\r\nHost: gw\r\n\r\n")
	before := ts.s.conns.DiscardedBytes()
	go io.WriteString(c, req.String())

	br := bufio.NewReader(c)
	for i, want := range []int{404, 200, 404, 200} {
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i+1, err)
		}
		body, _ := io.ReadAll(r.Body)
		if r.StatusCode != want {
			t.Fatalf("answer %d: %d %s; want %d", i+1, r.StatusCode, body, want)
		}
		if i == 1 && !strings.Contains(string(body), `"prediction"`) {
			t.Fatalf("the prediction after a drained body: %s", body)
		}
	}
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if b, err := br.Peek(1); err == nil {
		t.Fatalf("more answers than requests: %q...", b)
	}
	// All but what fasthttp had buffered with each header (16 KiB at most) and the chunk framing.
	if got, want := ts.s.conns.DiscardedBytes()-before, int64(2*len(big)-4*readBufferSize); got < want {
		t.Errorf("%d bytes discarded in the kernel of the drained bodies' %d; want at least %d", got, 2*len(big), want)
	}
}
