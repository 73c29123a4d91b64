package main_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/internal/testcert"
	"github.com/imagegate/imagegate/loadtest/oip"
	"github.com/imagegate/imagegate/loadtest/oipgrpc"
)

// The gateway with TLS and API keys, as a user runs it: the real binary, curl, Go's client,
// grpc-go and Python's grpcio (what tritonclient.grpc's ssl=True uses), hostile TLS clients,
// certificate rotation under load, and two tenants with limits (docs/security.md).

const (
	keyAlpha = "alpha-0123456789abcdef0123456789" // every model
	keyBeta  = "beta-0123456789abcdef01234567890" // model other only
)

// twoModelsYAML serves the committed model under its own name and as "other".
func twoModelsYAML(t *testing.T) string {
	root := repoRoot(t)
	m := func(name string) string {
		return fmt.Sprintf(`  - name: %s
    path: %[2]s/models/mobilenet_v3_small/model.onnx
    labels: %[2]s/models/mobilenet_v3_small/labels.txt
    batching: {max_batch_size: 4, max_queue_delay: 1ms}
    runtime: {instances: 1, intra_op_threads: 1, inter_op_threads: 1}
`, name, root)
	}
	return "models:\n" + m("mobilenet_v3_small") + m("other")
}

// keyFile writes the key file of alpha and beta (beta's by its digest).
func keyFile(t *testing.T, extra string) string {
	h := sha256.Sum256([]byte(keyBeta))
	p := filepath.Join(t.TempDir(), "keys.yaml")
	text := fmt.Sprintf("keys:\n  - {name: alpha, key: %s}\n  - {name: beta, sha256: %s, models: [other]}\n%s", keyAlpha, hex.EncodeToString(h[:]), extra)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// secured is a gateway serving TLS (its CA, its certificate files) and the clients to reach it.
type secured struct {
	*gateway
	ca             *testcert.CA
	cert, key      string
	https, grpcTLS string
	client         *http.Client
}

func startSecured(t *testing.T, server string, env ...string) *secured {
	t.Helper()
	ca := testcert.NewCA(t, "imagegate-test")
	dir := t.TempDir()
	s := &secured{ca: ca, cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(dir, "tls.key")}
	ca.Server(t, "gateway-1").Install(t, s.cert, s.key)
	cfg := fmt.Sprintf("server:\n  tls: {cert_file: %s, key_file: %s}\n%s%s", s.cert, s.key, server, twoModelsYAML(t))
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	s.gateway = launch(t, env, "-config", path, "-listen", "127.0.0.1:0", "-admin-listen", "off", "-grpc-listen", "127.0.0.1:0")
	s.https = "https://" + strings.TrimPrefix(s.url, "http://")
	s.mu.Lock()
	s.grpcTLS = s.grpc
	s.mu.Unlock()
	s.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: ca.ClientConfig(), MaxIdleConnsPerHost: 64}}
	return s
}

func (s *secured) do(method, path, ct string, body []byte, header ...string) answer {
	s.t.Helper()
	req, err := http.NewRequest(method, s.https+path, bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return answer{status: -1, body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

func (s *secured) grpcClient(t *testing.T, header map[string]string) *oipgrpc.Client {
	c, err := oipgrpc.Dial(s.grpcTLS, oipgrpc.Options{Header: header,
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(s.ca.ClientConfig()))}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// grpcioScript calls ModelInfer with Python's grpcio over TLS (the request marshalled here),
// as tritonclient.grpc does with ssl=True: it prints OK and writes the response, or prints the
// status code's name.
const grpcioScript = `
import sys, grpc
addr, ca, req, out, key = sys.argv[1:6]
creds = grpc.ssl_channel_credentials(root_certificates=open(ca, 'rb').read())
ch = grpc.secure_channel(addr, creds, options=[('grpc.max_receive_message_length', 64 << 20), ('grpc.max_send_message_length', 64 << 20)])
call = ch.unary_unary('/inference.GRPCInferenceService/ModelInfer', request_serializer=None, response_deserializer=None)
md = [('authorization', 'Bearer ' + key)] if key else []
try:
    resp = call(open(req, 'rb').read(), metadata=md, timeout=30)
    open(out, 'wb').write(resp)
    print('OK')
except grpc.RpcError as e:
    print(e.code().name)
`

func grpcio(t *testing.T, addr, ca string, req []byte, key string) (string, []byte) {
	t.Helper()
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import grpc").Run(); err != nil {
		t.Skip("Debian's python3 has no grpcio (apt-get install python3-grpcio, or scripts/setup.sh test):", err)
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "req.bin"), filepath.Join(dir, "resp.bin")
	os.WriteFile(in, req, 0o600)
	b, err := exec.Command(py, "-c", grpcioScript, addr, ca, in, out, key).CombinedOutput()
	if err != nil {
		t.Fatalf("grpcio: %v\n%s", err, b)
	}
	resp, _ := os.ReadFile(out)
	return strings.TrimSpace(string(b)), resp
}

// TestTLSAndKeysWithRealClients: over TLS, curl (--cacert), Go's client, grpc-go and Python's
// grpcio get the answers a plain-text gateway gives; every inference path and both protocols
// refuse a missing or wrong key (401 with WWW-Authenticate, UNAUTHENTICATED) before the body is
// read; a key limited to one model gets 403 / PERMISSION_DENIED on another; the key names
// label the access log, the trace and the per-key counter; no key appears in the log, the
// traces, the metrics or an answer.
func TestTLSAndKeysWithRealClients(t *testing.T) {
	payload, err := os.ReadFile(filepath.Join(sharedDir(t), "seed", "rime_5868.json"))
	if err != nil {
		t.Fatal(err)
	}
	plain := startGateway(t, twoModelsYAML(t))
	want := plain.do("POST", "/predict/", "application/json", payload)
	if want.status != 200 {
		t.Fatalf("plain text: %d %s", want.status, want.body)
	}
	rcv := &otlpReceiver{}
	endpoint := rcv.listen(t, "http/protobuf")
	s := startSecured(t, fmt.Sprintf("  api_keys: {file: %s}\nlog: {access: {mode: all, format: json}}\n", keyFile(t, "")),
		"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT="+endpoint, "OTEL_BSP_SCHEDULE_DELAY=50")
	var answers bytes.Buffer

	// curl, Go's client.
	out, err := exec.Command("curl", "-sS", "--cacert", s.ca.File, "-H", "Authorization: Bearer "+keyAlpha, "-H", "Content-Type: application/json",
		"--data-binary", "@"+filepath.Join(sharedDir(t), "seed", "rime_5868.json"), s.https+"/predict/").CombinedOutput()
	if err != nil || !bytes.Equal(out, want.body) {
		t.Fatalf("curl --cacert: %v %s; plain text answered %s", err, out, want.body)
	}
	if a := s.do("POST", "/predict/", "application/json", payload, "X-API-Key", keyAlpha); a.status != 200 || !bytes.Equal(a.body, want.body) {
		t.Fatalf("Go's client: %d %s", a.status, a.body)
	}
	// gRPC: grpc-go and grpcio, against plain text's answer.
	img, err := os.ReadFile(filepath.Join(sharedDir(t), "images", "skimage_rocket.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	gc := s.grpcClient(t, map[string]string{"authorization": "Bearer " + keyAlpha})
	md, err := gc.ModelMetadata(t.Context(), "mobilenet_v3_small", "")
	if err != nil {
		t.Fatal(err)
	}
	reqBytes, err := oipgrpc.MarshalRequest("mobilenet_v3_small", "", &oip.Request{Inputs: []oip.Input{oip.ImageInput(md.Inputs[0].Name, true, img)}})
	if err != nil {
		t.Fatal(err)
	}
	var req inference.ModelInferRequest
	proto.Unmarshal(reqBytes, &req)
	ref, err := plain.grpcClient(t).InferProto(t.Context(), &req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := gc.InferProto(t.Context(), &req)
	if err != nil || !bytes.Equal(got.RawOutputContents[0], ref.RawOutputContents[0]) {
		t.Fatalf("grpc-go over TLS: %v, scores differ from plain text's: %v", err, got)
	}
	code, raw := grpcio(t, s.grpcTLS, s.ca.File, reqBytes, keyAlpha)
	var py inference.ModelInferResponse
	if code != "OK" || proto.Unmarshal(raw, &py) != nil || !bytes.Equal(py.RawOutputContents[0], ref.RawOutputContents[0]) {
		t.Fatalf("grpcio over TLS: %s, %v", code, &py)
	}
	if code, _ := grpcio(t, s.grpcTLS, s.ca.File, reqBytes, ""); code != "UNAUTHENTICATED" {
		t.Fatalf("grpcio without a key: %s", code)
	}

	// Refusals: no key, a wrong key, over every inference path and both protocols.
	for _, path := range []string{"/predict/", "/models/mobilenet_v3_small/predict", "/v2/models/mobilenet_v3_small/infer", "/v2/models/nope/infer"} {
		for _, hdr := range [][]string{nil, {"Authorization", "Bearer " + keyAlpha + "-not"}, {"X-API-Key", "not-a-key-" + keyBeta}} {
			a := s.do("POST", path, "application/json", payload, hdr...)
			answers.Write(a.body)
			if a.status != 401 || !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %v: %d %v %s", path, hdr, a.status, a.header, a.body)
			}
		}
	}
	for _, hdr := range []map[string]string{nil, {"authorization": "Bearer nope-" + keyAlpha}} {
		_, err := s.grpcClient(t, hdr).InferProto(t.Context(), &req)
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("gRPC %v: %v", hdr, err)
		}
		answers.WriteString(err.Error())
	}
	// Before the body: the 401 comes with the upload's first bytes only.
	c, err := tls.Dial("tcp", strings.TrimPrefix(s.https, "https://"), s.ca.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST /predict/ HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(payload), payload[:1024])
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 401 || !resp.Close {
		t.Fatalf("a 310 KB upload without a key, 1 KB sent: %v %v", resp, err)
	}
	c.Close()
	// Key beta: model other only.
	if a := s.do("POST", "/models/other/predict", "application/json", payload, "Authorization", "Bearer "+keyBeta); a.status != 200 {
		t.Fatalf("beta on other: %d %s", a.status, a.body)
	}
	for _, path := range []string{"/predict/", "/v2/models/mobilenet_v3_small/infer"} {
		a := s.do("POST", path, "application/json", payload, "Authorization", "Bearer "+keyBeta)
		answers.Write(a.body)
		if a.status != 403 {
			t.Errorf("beta on %s: %d %s", path, a.status, a.body)
		}
	}
	_, err = s.grpcClient(t, map[string]string{"x-api-key": keyBeta}).InferProto(t.Context(), &req)
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("beta over gRPC on another model: %v", err)
	}
	// Metrics (open), the access log, the traces: names, never keys.
	metrics := s.do("GET", "/metrics", "", nil)
	if metrics.status != 200 {
		t.Fatalf("/metrics: %d", metrics.status)
	}
	for _, want := range []string{`gateway_key_requests_total{key="alpha",code="200"} 4`, `gateway_key_requests_total{key="beta",code="403"} 3`,
		`gateway_key_requests_total{key="beta",code="200"} 1`, `gateway_auth_refusals_total{reason="missing"} 7`} {
		if !strings.Contains(string(metrics.body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	time.Sleep(500 * time.Millisecond) // the last spans are exported
	var traced []string
	for _, sp := range rcv.named("infer mobilenet_v3_small") {
		traced = append(traced, spanAttr(sp, "imagegate.key"))
	}
	if !strings.Contains(strings.Join(traced, ","), "alpha") {
		t.Errorf("no trace names key alpha: %v", traced)
	}
	rcv.mu.Lock()
	spans := fmt.Sprint(rcv.spans)
	rcv.mu.Unlock()
	log := s.log()
	if !strings.Contains(log, `"key":"alpha"`) || !strings.Contains(log, `"key":"beta"`) {
		t.Errorf("the access log does not name the keys:\n%s", log)
	}
	for what, text := range map[string]string{"log": log, "traces": spans, "metrics": string(metrics.body), "answers": answers.String()} {
		for _, k := range []string{keyAlpha, keyBeta} {
			if strings.Contains(text, k) {
				t.Errorf("the %s hold a key", what)
			}
		}
	}
}

// TestTLSRotationUnderLoad: while four clients run a closed loop of predictions over HTTPS,
// half of them opening a connection per request, the certificate files are replaced by a new
// pair, by a mismatched one (refused, logged; the old pair keeps serving), then by a third
// pair: no request fails, and the new certificates are served without a restart.
func TestTLSRotationUnderLoad(t *testing.T) {
	s := startSecured(t, "  credentials_poll: 100ms\n")
	img := rocketJPEG(t)
	var served sync.Map
	var fails atomic.Int64
	var firstFail atomic.Value
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := range 4 {
		cfg := s.ca.ClientConfig()
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			served.Store(cs.PeerCertificates[0].Subject.CommonName, true)
			return nil
		}
		client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: i%2 == 0}}
		wg.Go(func() {
			for !stop.Load() {
				resp, err := client.Post(s.https+"/predict/", "image/jpeg", bytes.NewReader(img))
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					fails.Add(1)
					firstFail.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	seen := func(name string) bool { _, ok := served.Load(name); return ok }
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				stop.Store(true)
				wg.Wait()
				t.Fatalf("%s: not within 20 s\n%s", what, s.log())
			}
		}
	}
	waitFor("first certificate", func() bool { return seen("gateway-1") })
	// The container's HEALTHCHECK (-healthcheck http://...) works with TLS on: it tries https.
	for _, u := range []string{s.url, s.https} {
		if out, err := exec.Command(gatewayBin(t), "-healthcheck", u+"/v2/health/ready").CombinedOutput(); err != nil {
			t.Errorf("-healthcheck %s: %v %s", u, err, out)
		}
	}
	s.ca.Server(t, "gateway-2").Install(t, s.cert, s.key)
	waitFor("the second certificate served", func() bool { return seen("gateway-2") })
	third := s.ca.Server(t, "gateway-3")
	os.WriteFile(s.key, third.KeyPEM, 0o600) // a key without its certificate: refused
	waitFor("the mismatched pair refused", func() bool { return strings.Contains(s.log(), "TLS files refused") })
	time.Sleep(300 * time.Millisecond) // requests keep coming with the old pair
	third.Install(t, s.cert, s.key)
	waitFor("the third certificate served", func() bool { return seen("gateway-3") })
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if fails.Load() > 0 {
		t.Fatalf("%d requests failed during the rotation; first: %v", fails.Load(), firstFail.Load())
	}
	if n := strings.Count(s.log(), "TLS certificate reloaded"); n != 4 { // http and grpc, twice
		t.Errorf("%d reloads logged, want 4:\n%s", n, s.log())
	}
}

// rocketJPEG is a photo from ../shared.
func rocketJPEG(t *testing.T) []byte {
	img, err := os.ReadFile(filepath.Join(sharedDir(t), "images", "skimage_rocket.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestTLSHostileClients: on the TLS listeners, a plain-text request is answered at once in
// plain text; garbage instead of a ClientHello is closed at once; a truncated handshake is
// closed at read_timeout; 10,000 connections that never finish a handshake are all closed by
// read_timeout while health checks and predictions over new TLS connections keep succeeding,
// and the gateway's memory comes back once they are gone. gRPC's TLS port closes the same
// clients.
func TestTLSHostileClients(t *testing.T) {
	s := startSecured(t, "  read_timeout: 2s\n")
	addr := strings.TrimPrefix(s.https, "https://")
	hello := s.ca.ClientHello()
	for _, port := range []struct{ name, addr string }{{"http", addr}, {"grpc", s.grpcTLS}} {
		for _, c := range []struct {
			name  string
			send  []byte
			quick bool
		}{
			{"plain HTTP", []byte("GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"), true},
			{"garbage", []byte("\x00\x01\x02\x03garbage garbage"), true},
			{"a garbage handshake record", []byte("\x16\x03\x01\x00\x10" + strings.Repeat("\xff", 16)), true},
			{"half a ClientHello", hello[:len(hello)/2], false},
		} {
			conn, err := net.Dial("tcp", port.addr)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			conn.Write(c.send)
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			b, _ := io.ReadAll(conn)
			took := time.Since(start)
			conn.Close()
			if c.quick && took > time.Second || !c.quick && (took < 1500*time.Millisecond || took > 5*time.Second) {
				t.Errorf("%s port, %s: closed after %v", port.name, c.name, took)
			}
			if port.name == "http" && c.name == "plain HTTP" && !bytes.HasPrefix(b, []byte("HTTP/1.1 400")) {
				t.Errorf("plain HTTP on the TLS port: %q", b)
			}
		}
	}

	// 10,000 stalled handshakes, against 10,000 request lines that stall on a plain-text
	// gateway (its slowloris): memory per connection, and the closes at read_timeout.
	const n = 10000
	plain := startGateway(t, "server: {read_timeout: 2s}\n"+twoModelsYAML(t))
	plainBase, plainHeld, plainConns := stall(t, plain.cmd.Process.Pid, strings.TrimPrefix(plain.url, "http://"), n, []byte("GET /v2/health/re"))
	plainPer := (plainHeld - plainBase) / n
	for _, c := range plainConns {
		c.Close()
	}
	base, held, conns := stall(t, s.cmd.Process.Pid, addr, n, hello[:len(hello)/2])
	img := rocketJPEG(t)
	for i := range 10 {
		if a := s.do("GET", "/v2/health/ready", "", nil); a.status != 200 {
			t.Fatalf("health check %d with %d stalled handshakes: %d %s", i, n, a.status, a.body)
		}
		if a := s.do("POST", "/predict/", "image/jpeg", img); a.status != 200 {
			t.Fatalf("prediction %d with %d stalled handshakes: %d %s", i, n, a.status, a.body)
		}
		s.client.CloseIdleConnections() // each a new connection, admitted beside the stalled ones
	}
	deadline := time.Now().Add(15 * time.Second)
	closed := 0
	for _, c := range conns {
		c.SetReadDeadline(deadline)
		if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeoutErr(err) {
			closed++
		}
		c.Close()
	}
	if closed != n {
		t.Errorf("%d of %d stalled handshakes closed by the server within read_timeout", closed, n)
	}
	after := vmRSS(t, s.cmd.Process.Pid)
	per := (held - base) / n
	t.Logf("RSS: %d MiB before, %d MiB with %d stalled handshakes (%.1f KiB each; a stalled plain-text request line: %.1f KiB), %d MiB once they were closed",
		base>>20, held>>20, n, float64(per)/1024, float64(plainPer)/1024, after>>20)
	// A race-instrumented server (GATEWAY_RACE) holds several times the memory, its shadow
	// unevenly: the bound is checked against the plain server only.
	if per > plainPer+16<<10 && os.Getenv("GATEWAY_RACE") == "" {
		t.Errorf("a stalled handshake holds %d KiB, a stalled plain-text request %d KiB", per>>10, plainPer>>10)
	}
	if v := s.metricTLS(t, `gateway_tls_handshake_failures_total{listener="http"}`); v < n {
		t.Errorf("failed handshakes counted: %v, want at least %d", v, n)
	}
}

// stall opens n connections to addr, each sending opening and then nothing, and returns the
// process's resident memory before and with them, and the connections.
func stall(t *testing.T, pid int, addr string, n int, opening []byte) (before, held int64, conns []net.Conn) {
	before = vmRSS(t, pid)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", len(conns), err)
		}
		c.Write(opening)
		conns = append(conns, c)
	}
	time.Sleep(200 * time.Millisecond) // the last ones accepted and read
	held = vmRSS(t, pid)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	return before, held, conns
}

func isTimeoutErr(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func (s *secured) metricTLS(t *testing.T, series string) float64 {
	a := s.do("GET", "/metrics", "", nil)
	for line := range strings.Lines(string(a.body)) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return -1
}

// vmRSS is a process's resident memory in bytes.
func vmRSS(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skip("no /proc:", err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscan(rest, &kb)
			return kb << 10
		}
	}
	return 0
}
