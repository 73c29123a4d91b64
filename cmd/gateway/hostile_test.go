package main_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// imagenetModelYAML serves the shared pretrained ImageNet classifier: unlike the committed
// default model (untrained weights), its answers differ clearly from photo to photo.
func imagenetModelYAML(t *testing.T, batching string) string {
	dir := filepath.Join(sharedDir(t), "models", "mobilenetv2-12-int8")
	if _, err := os.Stat(filepath.Join(dir, "mobilenetv2-12-int8.onnx")); err != nil {
		t.Skip("the shared ImageNet model is absent:", err)
	}
	return fmt.Sprintf(`  - name: mobilenetv2
    path: %s/mobilenetv2-12-int8.onnx
    labels: %s/imagenet-simple-labels.json
    batching: %s
    runtime: {instances: 2}
`, dir, dir, batching)
}

// bogusJPEGs are inputs that must never be answered 200: JPEG magic only, headers without
// a frame, a stream that omits its tables (a pooled decoder once filled them in from the
// previous image), a frame that decodes no row, and photos cut short.
func bogusJPEGs(t *testing.T, photos map[string][]byte) map[string][]byte {
	bogus := map[string][]byte{
		"magic only": {0xFF, 0xD8, 0xFF},
		"SOI+EOI":    {0xFF, 0xD8, 0xFF, 0xD9},
		// SOF and SOS without quantization or Huffman tables (found by FuzzPooledMatchesFresh)
		"no tables": []byte("\xff\xd8\xff\xc0\x00\x0b\x08\x00\x30\x00\x30\x01\x01\x11\x00\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00" + strings.Repeat("0", 40)),
		// a frame that decodes without writing a row (found by FuzzPooledMatchesFresh)
		"no rows": []byte("\xff\xd8\xff\xdb\x00C\x00" + strings.Repeat("0", 64) + "\xff\xc0\x00\v\b\x000\x000\x01\x011\x00\xff\xda\x00\b\x01\x010000"),
	}
	for name, b := range photos {
		if !bytes.HasPrefix(b, []byte{0xFF, 0xD8}) {
			continue
		}
		sos := bytes.Index(b, []byte{0xFF, 0xDA})
		if sos < 0 {
			t.Fatalf("%s: no start of scan", name)
		}
		bogus[name+" headers only"] = b[:sos]
		bogus[name+" cut in its scan"] = b[:sos+(len(b)-sos)/2]
		bogus[name+" without its last 2 bytes"] = b[:len(b)-2]
	}
	return bogus
}

// TestNoAnswerCrossesRequests: four clients interleave real photos and bogus JPEGs for
// 2,000 requests against the real binary. No bogus request is answered 200, and every
// photo's scores equal its scores when it is sent alone. (A pooled decoder once answered
// FF D8 FF with the previous client's classification.)
func TestNoAnswerCrossesRequests(t *testing.T) {
	shared := sharedDir(t)
	g := startGateway(t, "models:\n"+imagenetModelYAML(t, "{max_batch_size: 4, max_queue_delay: 2ms}"))
	photos := map[string][]byte{}
	for _, n := range []string{"skimage_rocket.jpg", "skimage_coffee.png", "skimage_chelsea_cat.png", "go_video-001_cmyk.jpeg",
		"exif_landscape_orient6.jpg", "ljt_testorig.jpg", "pillow_hopper_gray.jpg"} {
		b, err := os.ReadFile(filepath.Join(shared, "images", n))
		if err != nil {
			t.Fatal(err)
		}
		photos[n] = b
	}
	bogus := bogusJPEGs(t, photos)
	alone := map[string][]float64{}
	var names []string
	for n, b := range photos {
		a := g.do("POST", "/predict/?top_k=1000", "", b)
		if a.status != 200 {
			t.Fatalf("%s alone: %d %s", n, a.status, a.body)
		}
		alone[n] = scoresByIndex(t, decodePrediction(t, a))
		names = append(names, n)
	}
	var bogusNames []string
	for n := range bogus {
		bogusNames = append(bogusNames, n)
	}
	const clients, perClient = 4, 500
	var wg sync.WaitGroup
	var mu sync.Mutex
	failures := 0
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if failures++; failures <= 10 {
			t.Errorf(format, args...)
		}
	}
	for c := range clients {
		wg.Go(func() {
			for i := range perClient {
				k := c*perClient + i
				if k%2 == 0 { // a photo, then (next iteration) bogus bytes on the same or another connection
					n := names[(k/2)%len(names)]
					a := g.do("POST", "/predict/?top_k=1000", "", photos[n])
					if a.status != 200 {
						fail("client %d request %d: %s: %d %s", c, i, n, a.status, a.body)
						continue
					}
					got, want := scoresByIndex(t, decodePrediction(t, a)), alone[n]
					for j := range want {
						if math.Abs(got[j]-want[j]) > 1e-4 {
							fail("client %d request %d: %s: score %d is %.5f, %.5f alone", c, i, n, j, got[j], want[j])
							break
						}
					}
					continue
				}
				n := bogusNames[(k/2)%len(bogusNames)]
				ct := []string{"image/jpeg", "", "application/octet-stream"}[k%3]
				a := g.do("POST", "/predict/?top_k=3", ct, bogus[n])
				if a.status == 200 || a.status < 400 || a.status > 499 {
					fail("client %d request %d: bogus %q (%d bytes): %d %.200s", c, i, n, len(bogus[n]), a.status, a.body)
				}
			}
		})
	}
	wg.Wait()
	if failures > 0 {
		t.Fatalf("%d of %d requests were answered wrongly", failures, clients*perClient)
	}
}

// rawExchange writes req on a new connection and returns the status line and body of the
// answer ("" if the server closed the connection without one).
func rawExchange(t *testing.T, g *gateway, req string, halfClose bool) (status string, body []byte) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	if halfClose {
		c.(*net.TCPConn).CloseWrite()
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.Status, b
}

// TestHTTPErrorsAreOurs: requests fasthttp cannot read get our JSON errors with the right
// status, and nothing of the request (a bearer token above all) is echoed in a response
// or written to the log.
func TestHTTPErrorsAreOurs(t *testing.T) {
	g := startGateway(t, "server: {read_timeout: 1s}\nmodels:\n"+defaultModelYAML(t, "{max_batch_size: 4, max_queue_delay: 1ms}"))
	const token = "Bearer s3cr3t-t0k3n-that-must-not-leak"
	big := strings.Repeat("x", 17<<10)
	cases := []struct {
		name, req, status string
	}{
		{"17 KB of headers", "POST /predict/ HTTP/1.1\r\nHost: x\r\nAuthorization: " + token + "\r\nX-Filler: " + big + "\r\nContent-Length: 0\r\n\r\n", "431"},
		{"17 KB path", "GET /" + big + " HTTP/1.1\r\nHost: x\r\nAuthorization: " + token + "\r\n\r\n", "414"},
		{"malformed request line", "GARBAGE\r\nAuthorization: " + token + "\r\n\r\n", "400"},
		{"bad content length", "POST /predict/ HTTP/1.1\r\nHost: x\r\nAuthorization: " + token + "\r\nContent-Length: nope\r\n\r\n", "400"},
	}
	for _, c := range cases {
		status, body := rawExchange(t, g, c.req, false)
		if !strings.HasPrefix(status, c.status) {
			t.Errorf("%s: status %q, want %s (body %.200q)", c.name, status, c.status, body)
		}
		var e struct{ Error string }
		if json.Unmarshal(body, &e) != nil || e.Error == "" {
			t.Errorf("%s: body %.200q is not our JSON error", c.name, body)
		}
		if bytes.Contains(body, []byte("s3cr3t")) || bytes.Contains(body, []byte("xxxxxxxx")) {
			t.Errorf("%s: the response echoes request bytes: %.300q", c.name, body)
		}
		t.Logf("%s: %s %s", c.name, status, e.Error)
	}
	// A header block that stops arriving: 408 once server.read_timeout passes.
	c, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /predict/ HTTP/1.1\r\nHost: x\r\nAuthorization: "+token+"\r\n")
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("slow header: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 408 || !bytes.Contains(body, []byte(`"error"`)) || bytes.Contains(body, []byte("s3cr3t")) {
		t.Errorf("slow header: %d %q, want our 408", resp.StatusCode, body)
	}
	// The server still serves, and nothing of the requests reached its log.
	if a := g.do("GET", "/v2/health/ready", "", nil); a.status != 200 {
		t.Fatalf("after the bad requests: %d %s", a.status, a.body)
	}
	time.Sleep(100 * time.Millisecond)
	if l := g.log(); strings.Contains(l, "s3cr3t") || strings.Contains(l, "xxxxxxxx") {
		t.Errorf("the log holds request bytes:\n%s", l)
	}
}

// TestClientInputForms: what browsers and JSON libraries send: a data: URL (FileReader's
// readAsDataURL), an escaped key, \u escapes in the base64; and a client that half-closes
// its connection gets a real status or none, never an unnamed one.
func TestClientInputForms(t *testing.T) {
	shared := sharedDir(t)
	jpeg, err := os.ReadFile(filepath.Join(shared, "images", "skimage_rocket.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "models:\n"+defaultModelYAML(t, "{max_batch_size: 8, max_queue_delay: 1500ms}"))
	b64 := base64.StdEncoding.EncodeToString(jpeg)
	for name, body := range map[string]string{
		"data URL":    `{"image":"data:image/jpeg;base64,` + b64 + `"}`,
		"escaped key": `{"\u0069mage":"` + b64 + `"}`,
		"u escapes":   `{"image":"` + strings.ReplaceAll(b64, "A", `\u0041`) + `"}`,
	} {
		if a := g.do("POST", "/predict/", "application/json", []byte(body)); a.status != 200 {
			t.Errorf("%s: %d %s", name, a.status, a.body)
		}
	}
	a := g.do("POST", "/predict/", "application/json", []byte(`{"image":"data:image/jpeg,`+b64[:40]+`"}`))
	if a.status != 400 || !strings.Contains(string(a.body), "base64") {
		t.Errorf("a data: URL that is not base64: %d %s", a.status, a.body)
	}
	// The request waits in the window (1.5 s) when the client shuts down its sending side.
	req := fmt.Sprintf("POST /predict/ HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n%s", len(jpeg), jpeg)
	status, body := rawExchange(t, g, req, true)
	if status != "" && (strings.HasPrefix(status, "499") || http.StatusText(atoiPrefix(status)) == "") {
		t.Fatalf("half-closed client: %q %s", status, body)
	}
	t.Logf("half-closed client: status %q", status)
}

func atoiPrefix(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}
