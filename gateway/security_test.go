package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/batcher"
	"github.com/imagegate/imagegate/internal/testcert"
)

const (
	keyA = "key-of-tenant-a-0123456789" // model m only, 1 request/s in bursts of 2
	keyB = "key-of-tenant-b-0123456789" // every model, no limit
)

// keyOptions writes a key file for tenants a and b.
func keyOptions(t *testing.T, o Options, open ...string) Options {
	t.Helper()
	h := sha256.Sum256([]byte(keyA))
	p := filepath.Join(t.TempDir(), "keys.yaml")
	text := fmt.Sprintf("keys:\n  - {name: a, sha256: %s, models: [m], rate: 1, burst: 2}\n  - {name: b, key: %s}\n", hex.EncodeToString(h[:]), keyB)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	o.Keys = KeyOptions{File: p, Open: open}
	return o
}

// TestKeysOverHTTP: with a key file, every path but the open ones needs a key (401 with
// WWW-Authenticate, before the model is looked up); a key limited to a model gets 403 on
// another; a key over its rate 429 with Retry-After; both header forms work. The access log
// names the key, and no answer, log line or metric holds a key.
func TestKeysOverHTTP(t *testing.T) {
	var log syncBuffer
	o := keyOptions(t, testOptions(), "health", "metrics")
	o.AccessLog = slog.New(slog.NewJSONHandler(&log, nil))
	o.AccessSample = 1
	m, other := modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}), modelOpts("other", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)})
	ts := newTestServer(t, o, m, other)
	img := solidPNG(t, 8, 8, 40)
	var bodies bytes.Buffer
	for _, path := range []string{"/predict/", "/models/m/predict", "/v2/models/m/infer", "/v2/models/nope/infer", "/v2/models/m", "/v2", "/nowhere"} {
		for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong-key-wrong-key"}, {"X-API-Key", keyA + "x"}, {"Authorization", "Basic " + keyA}} {
			r := ts.do("POST", path, "image/png", img, hdr...)
			bodies.Write(r.body)
			if r.status != 401 || !strings.Contains(string(r.body), "key") {
				t.Errorf("%s with %v: %d %s; want 401", path, hdr, r.status, r.body)
			}
		}
	}
	if r := ts.do("POST", "/predict/", "image/png", img, "Authorization", "bearer "+keyA+"x"); r.status != 401 {
		t.Errorf("a wrong key: %d", r.status)
	}
	for _, path := range []string{"/v2/health/ready", "/v2/health/live", "/", "/metrics", "/v2/models/m/ready"} {
		if r := ts.do("GET", path, "", nil); r.status != 200 {
			t.Errorf("open %s: %d %s", path, r.status, r.body)
		}
	}
	if r := ts.do("POST", "/predict/", "image/png", img, "Authorization", "Bearer "+keyA); r.status != 200 {
		t.Fatalf("key a on the default model: %d %s", r.status, r.body)
	}
	if r := ts.do("POST", "/v2/models/m/infer", "", nil, "X-API-Key", keyB); r.status != 400 {
		t.Fatalf("key b, X-API-Key, an empty body: %d %s (want the pipeline's 400)", r.status, r.body)
	}
	for _, path := range []string{"/models/other/predict", "/v2/models/other.tensor/infer", "/v2/models/other", "/v2/models/stats", "/v2/models/nope/infer"} {
		r := ts.do("POST", path, "image/png", img, "Authorization", "Bearer "+keyA)
		bodies.Write(r.body)
		if r.status != 403 {
			t.Errorf("key a on %s: %d %s; want 403", path, r.status, r.body)
		}
	}
	if r := ts.do("POST", "/models/other/predict", "image/png", img, "Authorization", "Bearer "+keyB); r.status != 200 {
		t.Fatalf("key b on another model: %d %s", r.status, r.body)
	}
	// Key a: 1/s in bursts of 2, one spent above.
	var limited reply
	for range 3 {
		if limited = ts.do("POST", "/models/m/predict", "image/png", img, "Authorization", "Bearer "+keyA); limited.status == 429 {
			break
		}
	}
	if limited.status != 429 || limited.header["Retry-After"] != "1" || !strings.Contains(string(limited.body), "rate") {
		t.Fatalf("key a over its rate: %d %v %s", limited.status, limited.header, limited.body)
	}
	bodies.Write(limited.body)
	for series, want := range map[string]float64{
		`gateway_key_requests_total{key="a",code="200"}`:  2,
		`gateway_key_requests_total{key="a",code="403"}`:  5,
		`gateway_key_requests_total{key="a",code="429"}`:  1,
		`gateway_key_requests_total{key="b",code="200"}`:  1,
		`gateway_key_requests_total{key="b",code="400"}`:  1,
		`gateway_auth_refusals_total{reason="missing"}`:   14,
		`gateway_auth_refusals_total{reason="invalid"}`:   15,
		`gateway_auth_refusals_total{reason="forbidden"}`: 5,
		`gateway_auth_refusals_total{reason="rate"}`:      1,
		`gateway_api_keys`: 2,
	} {
		if got := ts.metric(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	var metricsText bytes.Buffer
	ts.s.WriteMetrics(&metricsText)
	for what, text := range map[string]string{"answers": bodies.String(), "access log": log.String(), "metrics": metricsText.String()} {
		for _, k := range []string{keyA, keyB, "wrong-key"} {
			if strings.Contains(text, k) {
				t.Errorf("the %s hold a key (%s)", what, k)
			}
		}
	}
	named := 0
	for _, l := range log.lines(t) {
		if l["key"] == "a" && l["path"] == "/predict/" && l["status"] == 200.0 {
			named++
		}
	}
	if named != 1 {
		t.Errorf("the access log names key a on %d successful /predict/ lines, want 1:\n%s", named, log.String())
	}
}

// TestKeysOpenCategories: with nothing open, health and metrics need a key too; with
// metadata open, metadata does not.
func TestKeysOpenCategories(t *testing.T) {
	ts := newTestServer(t, keyOptions(t, testOptions()), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	for _, path := range []string{"/v2/health/ready", "/metrics", "/v2/models/m/ready", "/v2"} {
		if r := ts.do("GET", path, "", nil); r.status != 401 {
			t.Errorf("%s with nothing open: %d", path, r.status)
		}
		if r := ts.do("GET", path, "", nil, "X-API-Key", keyB); r.status != 200 {
			t.Errorf("%s with a key: %d", path, r.status)
		}
	}
	ts2 := newTestServer(t, keyOptions(t, testOptions(), "metadata"), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	if r := ts2.do("GET", "/v2/models/m", "", nil); r.status != 200 {
		t.Errorf("metadata open: %d", r.status)
	}
	if _, err := New(keyOptions(t, testOptions(), "inference"), nil); err == nil || !strings.Contains(err.Error(), "inference") {
		t.Errorf("inference opened: %v", err)
	}
}

// countingListener counts, per connection, the bytes the server read before it first wrote.
type countingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*countingConn
}

type countingConn struct {
	net.Conn
	read, beforeAnswer atomic.Int64
	wrote              atomic.Bool
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	if !c.wrote.Load() {
		c.beforeAnswer.Add(int64(n))
	}
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.wrote.Store(true)
	return c.Conn.Write(b)
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &countingConn{Conn: c}
	l.mu.Lock()
	l.conns = append(l.conns, cc)
	l.mu.Unlock()
	return cc, nil
}

// article310KB is the article's payload (310 KB of JSON), or as many bytes of JSON when
// ../shared is absent.
func article310KB(t *testing.T) []byte {
	if b, err := os.ReadFile("../../shared/seed/rime_5868.json"); err == nil {
		return b
	}
	t.Log("../shared/seed/rime_5868.json is absent: 310 KB of made-up JSON instead")
	return []byte(`{"image":"` + strings.Repeat("A", 310<<10) + `"}`)
}

// TestKeyRefusalsReadNoBody: a 310 KB upload without a key, with a wrong key, or over its
// key's rate, is answered before its body is read (the connection's byte count before the
// answer is its header and at most a read buffer), and the connection closes after the
// answer; with Expect: 100-continue, no "100 Continue" comes.
func TestKeyRefusalsReadNoBody(t *testing.T) {
	ts := newTestServer(t, keyOptions(t, testOptions(), "health"), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: tcp}
	go ts.s.Serve(cl)
	body := article310KB(t)
	// Key a's burst of 2 is spent first, so that its third request is over the rate.
	for range 2 {
		ts.do("POST", "/models/m/predict", "image/png", solidPNG(t, 8, 8, 1), "X-API-Key", keyA)
	}
	for _, c := range []struct {
		name, hdr string
		want      int
	}{{"no key", "", 401}, {"a wrong key", "Authorization: Bearer not-a-key-at-all\r\n", 401}, {"over its rate", "X-API-Key: " + keyA + "\r\n", 429}} {
		for _, expect := range []bool{false, true} {
			conn, err := net.Dial("tcp", tcp.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			head := fmt.Sprintf("POST /predict/ HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s", len(body), c.hdr)
			if expect {
				head += "Expect: 100-continue\r\n"
			}
			io.WriteString(conn, head+"\r\n")
			if !expect {
				go conn.Write(body) // the whole upload, as a client that does not wait sends it
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("%s (expect %v): %v", c.name, expect, err)
			}
			if resp.StatusCode != c.want || !resp.Close {
				t.Errorf("%s (expect %v): %d, close %v; want %d and close", c.name, expect, resp.StatusCode, resp.Close, c.want)
			}
			if c.want == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s: WWW-Authenticate %q", c.name, resp.Header.Get("WWW-Authenticate"))
			}
			conn.Close()
			cl.mu.Lock()
			sc := cl.conns[len(cl.conns)-1]
			cl.mu.Unlock()
			// The header's read takes what the read buffer holds (16 KiB) and the streamed
			// body's first read a little more: far from the body's 310 KB.
			if n := sc.beforeAnswer.Load(); n > 2*readBufferSize {
				t.Errorf("%s (expect %v): the server read %d bytes before it answered: the body (%d bytes) was read", c.name, expect, n, len(body))
			}
		}
	}
}

// tlsServer serves s over TLS on loopback (HTTP and gRPC listeners with their own
// certificates, named http and grpc) and returns their addresses.
func tlsFiles(t *testing.T, ca *testcert.CA, name string) *TLSOptions {
	p := ca.Server(t, name)
	dir := t.TempDir()
	o := &TLSOptions{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	p.Install(t, o.CertFile, o.KeyFile)
	return o
}

// TestTLSListeners: HTTPS and gRPC over TLS answer as plain text does; a plain-text request on
// the TLS port is told so at once, in plain text; the gRPC listener with client certificates
// required refuses a client without one; replaced files are served after a reload (and by the
// poll), a bad pair is refused and the old one kept, counted in the metrics.
func TestTLSListeners(t *testing.T) {
	ca := testcert.NewCA(t, "gw")
	o := testOptions()
	o.TLS.HTTP = tlsFiles(t, ca, "http")
	o.TLS.GRPC = tlsFiles(t, ca, "grpc")
	o.TLS.GRPC.ClientCAFile = ca.File // require, by default
	o.CredentialsPoll = 50 * time.Millisecond
	s, err := New(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddModel(modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)})); err != nil {
		t.Fatal(err)
	}
	ts := serve(t, s) // in memory, in TLS as every listener Serve is given (no client here), and shut down at the end
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(hl)
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeGRPC(gl)
	img := solidPNG(t, 8, 8, 40)
	plain := newTestServer(t, testOptions(), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)})).do("POST", "/predict/", "image/png", img)

	var served atomic.Value
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(),
		VerifyConnection: func(cs tls.ConnectionState) error {
			served.Store(cs.PeerCertificates[0].Subject.CommonName)
			return nil
		}}}}
	post := func() (int, string) {
		t.Helper()
		resp, err := client.Post("https://"+hl.Addr().String()+"/predict/", "image/png", bytes.NewReader(img))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, b := post(); st != 200 || b != string(plain.body) {
		t.Fatalf("HTTPS: %d %s; plain text answered %s", st, b, plain.body)
	}
	// Plain HTTP on the TLS port.
	c, err := net.Dial("tcp", hl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(2 * time.Second))
	io.WriteString(c, "GET /v2/health/ready HTTP/1.1\r\nHost: gw\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("plain HTTP on the TLS port: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	c.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "https://") {
		t.Fatalf("plain HTTP on the TLS port: %d %s", resp.StatusCode, b)
	}
	if v := ts.metric(`gateway_tls_handshake_failures_total{listener="http"}`); v != 1 {
		t.Errorf("failed handshakes counted: %v", v)
	}

	// gRPC over TLS, client certificates required.
	grpcCall := func(certs ...tls.Certificate) error {
		cc, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(ca.ClientConfig(certs...))))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := inference.NewGRPCInferenceServiceClient(cc).ModelInfer(ctx, imageRequest("m", img))
		if err == nil && len(rawScores(t, resp)) != 3 {
			t.Fatalf("gRPC over TLS: %v", resp)
		}
		return err
	}
	if err := grpcCall(ca.Client(t, "client").TLS(t)); err != nil {
		t.Fatalf("gRPC with a client certificate: %v", err)
	}
	if err := grpcCall(); status.Code(err) != codes.Unavailable {
		t.Fatalf("gRPC without a client certificate: %v", err)
	}

	// Rotation: a bad pair is refused (the old one serves), a good one is served.
	other := ca.Server(t, "http-2")
	os.WriteFile(o.TLS.HTTP.KeyFile, other.KeyPEM, 0o600) // the new key before its certificate
	s.Reload()
	if st, _ := post(); st != 200 || served.Load() != "http" {
		t.Fatalf("after a mismatched pair: %d, served %v", st, served.Load())
	}
	if v := ts.metric(`gateway_credential_reloads_total{kind="tls",result="failed"}`); v != 1 {
		t.Errorf("refused reloads counted: %v", v)
	}
	other.Install(t, o.TLS.HTTP.CertFile, o.TLS.HTTP.KeyFile) // the poll picks it up
	waitUntil(t, func() bool {
		client.CloseIdleConnections()
		st, _ := post()
		return st == 200 && served.Load() == "http-2"
	})
	if v := ts.metric(`gateway_tls_certificate_expiry_timestamp_seconds{listener="http"}`); v != float64(other.Leaf.NotAfter.Unix()) {
		t.Errorf("expiry gauge %v, want %d", v, other.Leaf.NotAfter.Unix())
	}
}

// TestAdminOverTLS: the admin listener serves its API over TLS of its own, and tells a
// plain-text client at once.
func TestAdminOverTLS(t *testing.T) {
	ca := testcert.NewCA(t, "gw")
	o := testOptions()
	o.TLS.Admin = tlsFiles(t, ca, "admin")
	ts := newTestServer(t, o, modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go ts.s.ServeAdmin(ln)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: ca.ClientConfig()}}
	resp, err := client.Get("https://" + ln.Addr().String() + "/v2/health/ready")
	if err != nil || resp.StatusCode != 200 || resp.TLS == nil || resp.TLS.PeerCertificates[0].Subject.CommonName != "admin" {
		t.Fatalf("admin over TLS: %v %v", resp, err)
	}
	resp.Body.Close()
	plainResp, err := http.Get("http://" + ln.Addr().String() + "/v2/health/ready")
	if err != nil || plainResp.StatusCode != 400 {
		t.Fatalf("plain text to the admin TLS port: %v %v", plainResp, err)
	}
	plainResp.Body.Close()
	if r := ts.do("GET", "/v2/health/ready", "", nil); r.status != 200 {
		t.Fatalf("the public listener stays plain: %d", r.status)
	}
}

// TestKeysOverGRPC: the key in metadata (authorization: Bearer, or x-api-key); without one
// or with a wrong one UNAUTHENTICATED before the message is read, on every method but health;
// a model the key may not use PERMISSION_DENIED; over its rate RESOURCE_EXHAUSTED with a
// RetryInfo; a stream's requests each take their place.
func TestKeysOverGRPC(t *testing.T) {
	ts, c, cc := newGRPCServer(t, keyOptions(t, testOptions(), "health"),
		modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}), modelOpts("other", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	img := solidPNG(t, 8, 8, 40)
	with := func(pairs ...string) context.Context {
		return metadata.NewOutgoingContext(t.Context(), metadata.Pairs(pairs...))
	}
	var refusedCtxs []context.Context
	for _, ctx := range []context.Context{t.Context(), with("authorization", "Bearer nope-nope-nope-nope"), with("x-api-key", keyA+"x")} {
		// Refused alike with an hour's deadline (refused by the handler: TestGRPCRefusalsHoldNothing).
		long, cancel := context.WithTimeout(ctx, time.Hour)
		defer cancel()
		refusedCtxs = append(refusedCtxs, ctx, long)
	}
	unknown := "/" + inference.GRPCInferenceService_ServiceDesc.ServiceName + "/NoSuchMethod"
	for _, ctx := range refusedCtxs {
		if _, err := c.ModelInfer(ctx, imageRequest("m", img)); status.Code(err) != codes.Unauthenticated {
			t.Errorf("ModelInfer: %v", err)
		}
		if err := cc.Invoke(ctx, unknown, &inference.ServerLiveRequest{}, &inference.ServerLiveResponse{}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("a method no service has: %v", err)
		}
		if _, err := c.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "m"}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("ModelMetadata: %v", err)
		}
		st, err := c.ModelStreamInfer(ctx)
		if err == nil {
			st.Send(imageRequest("m", img))
			_, err = st.Recv()
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("ModelStreamInfer: %v", err)
		}
	}
	if r, err := c.ServerReady(t.Context(), &inference.ServerReadyRequest{}); err != nil || !r.Ready {
		t.Errorf("ServerReady, open: %v %v", r, err)
	}
	if r, err := healthgrpc.NewHealthClient(cc).Check(t.Context(), &healthgrpc.HealthCheckRequest{}); err != nil || r.Status != healthgrpc.HealthCheckResponse_SERVING {
		t.Errorf("health, open: %v %v", r, err)
	}
	_, _, closed := newGRPCServer(t, keyOptions(t, testOptions()), modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	for _, ctx := range refusedCtxs {
		if r, err := healthgrpc.NewHealthClient(closed).Check(ctx, &healthgrpc.HealthCheckRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("health, not open: %v %v", r, err)
		}
	}
	a, b := with("authorization", "Bearer "+keyA), with("x-api-key", keyB)
	if err := cc.Invoke(b, unknown, &inference.ServerLiveRequest{}, &inference.ServerLiveResponse{}); status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "NoSuchMethod") {
		t.Errorf("a method no service has, with a key: %v", err)
	}
	if _, err := c.ModelInfer(a, imageRequest("other", img)); status.Code(err) != codes.PermissionDenied {
		t.Errorf("key a on another model: %v", err)
	}
	if _, err := c.ModelMetadata(a, &inference.ModelMetadataRequest{Name: "other"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("key a, another model's metadata: %v", err)
	}
	if _, err := c.ModelInfer(b, imageRequest("other", img)); err != nil {
		t.Errorf("key b: %v", err)
	}
	var err error
	for range 3 { // a's burst is 2
		if _, err = c.ModelInfer(a, imageRequest("m", img)); err != nil {
			break
		}
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("key a over its rate: %v", err)
	}
	var retry *errdetails.RetryInfo
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri
		}
	}
	if retry == nil || retry.RetryDelay.AsDuration() <= 0 || retry.RetryDelay.AsDuration() > time.Second {
		t.Errorf("RetryInfo %v", retry)
	}
	// A stream of key b: each request answered; of key a (its bucket empty): refused in turn.
	for _, k := range []struct {
		ctx  context.Context
		fail bool
	}{{b, false}, {a, true}} {
		st, err := c.ModelStreamInfer(k.ctx)
		if err != nil {
			t.Fatal(err)
		}
		st.Send(imageRequest("m", img))
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if failed := r.ErrorMessage != ""; failed != k.fail {
			t.Errorf("stream request: error %q, want failed %v", r.ErrorMessage, k.fail)
		}
		st.CloseSend()
	}
	waitUntil(t, func() bool { return ts.metric(`gateway_key_requests_total{key="b",code="200"}`) == 2 })
	if v := ts.metric(`gateway_key_requests_total{key="a",code="429"}`); v != 2 {
		t.Errorf(`key a's 429s: %v, want 2`, v)
	}
	if v := ts.metric(`gateway_key_requests_total{key="a",code="403"}`); v != 2 {
		t.Errorf(`key a's 403s: %v, want 2`, v)
	}
}

// TestKeysAndAdmissionCountedApart: at every entry (HTTP, Expect: 100-continue, the gRPC
// tap, a stream's request) the key is decided before the door, and the two are counted apart:
// a request its key refuses is in gateway_auth_refusals_total only (it never reached the door:
// not in gateway_refusals_total, not in gateway_requests_total), one the door refuses is in
// those and not among the key's refusals (its key counts it by its status). Every place a
// request took in its key's requests in flight is given back once, whichever way it ended:
// the count is 0 again, not below.
func TestKeysAndAdmissionCountedApart(t *testing.T) {
	const keyOne = "key-of-tenant-one-0123456789" // one request in flight at most
	p := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(p, []byte(fmt.Sprintf("keys:\n  - {name: b, key: %s}\n  - {name: one, key: %s, max_inflight: 1}\n", keyB, keyOne)), 0o600); err != nil {
		t.Fatal(err)
	}
	o := testOptions()
	o.Keys = KeyOptions{File: p}
	run := newFake[float32](3*side*side, 3, 1)
	mo := modelOpts("m", RunnersOf[float32]{run})
	mo.Batching = batcher.Config{MaxBatchSize: 1, MaxQueueSize: 1} // two samples: one runs, one waits
	ts, c, _ := newGRPCServer(t, o, mo)
	run.gate = make(chan struct{}) // after the model's warm-up run
	img := solidPNG(t, 8, 8, 40)
	m := ts.s.models.Load().byName["m"][0]
	// One request of each key takes the model's queue: held until the gate opens. The second
	// is sent once the first runs: until then the first holds max_queue_size's one place, and
	// the second would be refused.
	held := make(chan reply, 2)
	warm := run.entered.Load()
	for i, k := range []string{keyOne, keyB} {
		go func() { held <- ts.do("POST", "/models/m/predict", "image/png", img, "X-API-Key", k) }()
		waitUntil(t, func() bool { return ts.s.sec.keys.Lookup([]byte(k)).Inflight() == 1 })
		if i == 0 {
			waitUntil(t, func() bool { return run.entered.Load() > warm })
		}
	}
	waitUntil(t, func() bool { return m.pending.Load() >= m.queueCap })

	// HTTP: no key (401), key one over its requests in flight (429), key b at a full queue (503).
	for _, c := range []struct {
		hdr  []string
		want int
	}{{nil, 401}, {[]string{"X-API-Key", keyOne}, 429}, {[]string{"X-API-Key", keyB}, 503}} {
		if r := ts.do("POST", "/models/m/predict", "image/png", img, c.hdr...); r.status != c.want {
			t.Errorf("HTTP %v: %d %s, want %d", c.hdr, r.status, r.body, c.want)
		}
	}
	// Expect: 100-continue: the same answers instead of "100 Continue".
	for _, c := range []struct {
		key  string
		want int
	}{{keyOne, 429}, {keyB, 503}} {
		conn, err := ts.ln.Dial()
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "POST /models/m/predict HTTP/1.1\r\nHost: gw\r\nContent-Type: image/png\r\nContent-Length: %d\r\nX-API-Key: %s\r\nExpect: 100-continue\r\n\r\n", len(img), c.key)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != c.want {
			t.Errorf("Expect: 100-continue, key %s: %v %v, want %d", c.key[:12], resp, err, c.want)
		}
		conn.Close()
	}
	// gRPC, unary (the tap) and a stream's request (each its own door).
	with := func(k string) context.Context {
		return metadata.NewOutgoingContext(t.Context(), metadata.Pairs("x-api-key", k))
	}
	for _, call := range []struct {
		ctx  context.Context
		want codes.Code
	}{{t.Context(), codes.Unauthenticated}, {with(keyOne), codes.ResourceExhausted}, {with(keyB), codes.Unavailable}} {
		if _, err := c.ModelInfer(call.ctx, imageRequest("m", img)); status.Code(err) != call.want {
			t.Errorf("ModelInfer: %v, want %v", err, call.want)
		}
	}
	for _, k := range []string{keyOne, keyB} {
		st, err := c.ModelStreamInfer(with(k))
		if err != nil {
			t.Fatal(err)
		}
		st.Send(imageRequest("m", img))
		if r, err := st.Recv(); err != nil || r.ErrorMessage == "" {
			t.Errorf("a stream's request at a full queue or over its key's limit: %v %v", r, err)
		}
		st.CloseSend()
		st.Recv() // the stream's end
	}

	close(run.gate)
	for range 2 {
		if r := <-held; r.status != 200 {
			t.Errorf("a held request: %d %s", r.status, r.body)
		}
	}
	waitUntil(t, func() bool { return ts.metric(`gateway_key_requests_total{key="b",code="503"}`) == 4 })
	for series, want := range map[string]float64{
		// The key's refusals: HTTP, Expect, unary, stream (and the two without a key).
		`gateway_auth_refusals_total{reason="inflight"}`:   4,
		`gateway_auth_refusals_total{reason="missing"}`:    2,
		`gateway_key_requests_total{key="one",code="429"}`: 4,
		// The door's: HTTP, Expect, the tap, the stream's request; counted on key b by status.
		`gateway_refusals_total{stage="queue"}`:                                     4,
		`gateway_requests_total{model="m",version="1",code="503"}`:                  4,
		`gateway_requests_total{model="m",version="1",code="429"}`:                  0, // none: the key's 429s are not the model's (the series is made at load)
		`gateway_key_requests_total{key="b",code="503"}`:                            4,
		`gateway_key_requests_total{key="b",code="200"}`:                            1,
		`gateway_key_requests_total{key="one",code="200"}`:                          1,
		`gateway_request_failures_total{model="m",version="1",reason="queue_full"}`: 4,
	} {
		if v := ts.metric(series); v != want {
			t.Errorf("%s = %v, want %v", series, v, want)
		}
	}
	for _, k := range []string{keyOne, keyB} {
		waitUntil(t, func() bool { return ts.s.sec.keys.Lookup([]byte(k)).Inflight() == 0 })
	}
}

// TestKeysNotOnTheAdminListener: keys are the public listener's. The admin listener (its own
// address and token) serves what it hands to handle, its console's inference included, without
// one, while the public listener asks for it; the console's page on the public listener is
// open as the metrics are.
func TestKeysNotOnTheAdminListener(t *testing.T) {
	o := keyOptions(t, testOptions(), "health", "metrics")
	o.Console = ConsolePublic
	ts := newTestServer(t, o, modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go ts.s.ServeAdmin(ln)
	admin := "http://" + ln.Addr().String()
	img := solidPNG(t, 8, 8, 40)
	for _, c := range []struct{ method, path string }{{"POST", "/models/m/predict"}, {"GET", "/v2/models/m/stats"}, {"GET", "/ui/"}, {"GET", "/v2/models/m"}} {
		var body io.Reader
		if c.method == "POST" {
			body = bytes.NewReader(img)
		}
		req, _ := http.NewRequest(c.method, admin+c.path, body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("admin listener, %s %s without a key: %d %s", c.method, c.path, resp.StatusCode, b)
		}
	}
	if r := ts.do("POST", "/models/m/predict", "image/png", img); r.status != 401 {
		t.Errorf("public listener, inference without a key: %d", r.status)
	}
	for _, path := range []string{"/ui/", "/ui/api/snapshot"} {
		if r := ts.do("GET", path, "", nil); r.status != 200 {
			t.Errorf("public listener, the console's %s without a key (open with metrics): %d %s", path, r.status, r.body)
		}
	}
	if v := ts.metric(`gateway_key_requests_total{key="a",code="200"}`); v != -1 {
		t.Errorf("a request of the admin listener was counted on a key: %v", v)
	}
}
