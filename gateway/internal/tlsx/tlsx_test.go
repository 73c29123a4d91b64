package tlsx

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/imagegate/imagegate/internal/testcert"
)

// serve serves src's configuration on a loopback listener: each connection answers its
// handshake and closes.
func serve(t *testing.T, src *Source) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", src.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if c.(*tls.Conn).Handshake() == nil {
					c.Write([]byte("ok"))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// dial makes a handshake with cfg and returns the server's certificate's common name.
func dial(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := io.ReadAll(c); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// files installs a pair as a listener's cert.pem and key.pem in a folder of its own.
func files(t *testing.T, p testcert.Pair) Files {
	dir := t.TempDir()
	f := Files{Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	p.Install(t, f.Cert, f.Key)
	return f
}

// TestReloadSwapsAndRefuses: new files are served from the next handshake; a key that is not
// the certificate's, a half-written file, an expired certificate and a missing file are
// refused (once per contents) while the pair in use keeps serving; restoring a good pair
// serves it.
func TestReloadSwapsAndRefuses(t *testing.T) {
	ca := testcert.NewCA(t, "test")
	one, two := ca.Server(t, "one"), ca.Server(t, "two")
	f := files(t, one)
	src, err := New(f, []string{"http/1.1"})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, src)
	client := ca.ClientConfig()
	expect := func(want string) {
		t.Helper()
		if got, err := dial(addr, client); err != nil || got != want {
			t.Fatalf("served %q (%v), want %q", got, err, want)
		}
	}
	expect("one")
	if changed, err := src.Reload(); changed || err != nil {
		t.Fatalf("unchanged files: changed %v, %v", changed, err)
	}
	two.Install(t, f.Cert, f.Key)
	if changed, err := src.Reload(); !changed || err != nil {
		t.Fatalf("new pair: changed %v, %v", changed, err)
	}
	expect("two")

	expired := ca.Server(t, "expired", testcert.Options{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	for _, bad := range []struct {
		name       string
		cert, key  []byte
		remove     bool
		wantReason string
	}{
		{"the key of another certificate", one.CertPEM, two.KeyPEM, false, "do not make a certificate and its key"},
		{"a half-written certificate", two.CertPEM[:len(two.CertPEM)/2], two.KeyPEM, false, "do not make"},
		{"an empty key file", two.CertPEM, nil, false, "is empty"},
		{"an expired certificate", expired.CertPEM, expired.KeyPEM, false, "not now"},
		{"no key file", two.CertPEM, nil, true, "no such file"},
	} {
		os.WriteFile(f.Cert, bad.cert, 0o600)
		os.WriteFile(f.Key, bad.key, 0o600)
		if bad.remove {
			os.Remove(f.Key)
		}
		changed, err := src.Reload()
		if changed || err == nil || !strings.Contains(err.Error(), bad.wantReason) {
			t.Fatalf("%s: changed %v, err %v; want refused (%s)", bad.name, changed, err, bad.wantReason)
		}
		if changed, err := src.Reload(); changed || err != nil {
			t.Fatalf("%s, polled again: changed %v, %v; want nothing new to report", bad.name, changed, err)
		}
		expect("two")
	}
	one.Install(t, f.Cert, f.Key)
	if changed, err := src.Reload(); !changed || err != nil {
		t.Fatalf("a good pair after bad ones: changed %v, %v", changed, err)
	}
	expect("one")
	if src.Leaf().Subject.CommonName != "one" {
		t.Fatalf("Leaf is %s", src.Leaf().Subject.CommonName)
	}
}

// TestNewRefusesBadFiles: what New refuses, each with a reason naming the file or setting.
func TestNewRefusesBadFiles(t *testing.T) {
	ca := testcert.NewCA(t, "test")
	one, two := ca.Server(t, "one"), ca.Server(t, "two")
	mixed := Files{Cert: one.CertFile, Key: two.KeyFile}
	for _, c := range []struct {
		f    Files
		want string
	}{
		{Files{Cert: one.CertFile}, "both needed"},
		{mixed, "do not make a certificate and its key"},
		{Files{Cert: one.CertFile, Key: one.KeyFile, MinVersion: tls.VersionTLS11}, "1.2 or 1.3"},
		{Files{Cert: one.CertFile, Key: one.KeyFile, ClientAuth: RequireClientCert}, "need a client CA"},
		{Files{Cert: one.CertFile, Key: one.KeyFile, ClientCA: ca.File}, "not asked for"},
		{Files{Cert: one.CertFile, Key: one.KeyFile, ClientCA: one.KeyFile, ClientAuth: RequireClientCert}, "holds no PEM certificate"},
		{Files{Cert: "/dev/zero", Key: one.KeyFile}, "not a regular file"},
	} {
		if _, err := New(c.f, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.f, err, c.want)
		}
	}
}

// TestClientCertificates: required, a client without a certificate or with one of another
// CA fails its handshake; optional, one without passes and one of another CA still fails.
func TestClientCertificates(t *testing.T) {
	ca, other := testcert.NewCA(t, "test"), testcert.NewCA(t, "other")
	srv := ca.Server(t, "server")
	good, stranger := ca.Client(t, "client"), other.Client(t, "stranger")
	for _, mode := range []ClientAuth{RequireClientCert, OptionalClientCert} {
		f := files(t, srv)
		f.ClientCA, f.ClientAuth = ca.File, mode
		src, err := New(f, nil)
		if err != nil {
			t.Fatal(err)
		}
		addr := serve(t, src)
		if _, err := dial(addr, ca.ClientConfig(good.TLS(t))); err != nil {
			t.Errorf("mode %d: a client with a good certificate: %v", mode, err)
		}
		// A client offers a certificate the server's CA list does not name only when made to.
		forced := ca.ClientConfig()
		sc := stranger.TLS(t)
		forced.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &sc, nil }
		if _, err := dial(addr, forced); err == nil {
			t.Errorf("mode %d: a certificate of another CA was accepted", mode)
		}
		_, err = dial(addr, ca.ClientConfig())
		if mode == RequireClientCert && err == nil {
			t.Errorf("required: a client without a certificate was accepted")
		}
		if mode == OptionalClientCert && err != nil {
			t.Errorf("optional: a client without a certificate: %v", err)
		}
	}
}

// TestMinVersion: with 1.3 the minimum, a client that stops at 1.2 fails its handshake.
func TestMinVersion(t *testing.T) {
	ca := testcert.NewCA(t, "test")
	f := files(t, ca.Server(t, "server"))
	f.MinVersion = tls.VersionTLS13
	src, err := New(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, src)
	old := ca.ClientConfig()
	old.MaxVersion = tls.VersionTLS12
	if _, err := dial(addr, old); err == nil {
		t.Fatal("a TLS 1.2 client was served with min_version 1.3")
	}
	if _, err := dial(addr, ca.ClientConfig()); err != nil {
		t.Fatal(err)
	}
}

// TestHandshakesDuringReloads: handshakes made while the files are rewritten and reloaded
// (good and bad pairs in turn) all succeed, each with one of the good certificates.
func TestHandshakesDuringReloads(t *testing.T) {
	ca := testcert.NewCA(t, "test")
	one, two := ca.Server(t, "one"), ca.Server(t, "two")
	f := files(t, one)
	src, err := New(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, src)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var fails atomic.Int64
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				if cn, err := dial(addr, ca.ClientConfig()); err != nil || cn != "one" && cn != "two" {
					fails.Add(1)
				}
			}
		})
	}
	for i := range 40 {
		switch i % 3 {
		case 0:
			two.Install(t, f.Cert, f.Key)
		case 1:
			os.WriteFile(f.Key, one.KeyPEM, 0o600) // mismatched until the certificate follows
		case 2:
			one.Install(t, f.Cert, f.Key)
		}
		src.Reload()
		time.Sleep(5 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if fails.Load() > 0 {
		t.Fatalf("%d handshakes failed during reloads", fails.Load())
	}
}

// BenchmarkHandshake is a full handshake (ECDSA P-256, TLS 1.3) over loopback, both sides
// in this process: the server's share of it is what a new connection costs the gateway.
func BenchmarkHandshake(b *testing.B) {
	ca := testcert.NewCA(b, "bench")
	p := ca.Server(b, "server")
	src, err := New(Files{Cert: p.CertFile, Key: p.KeyFile}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				tc := tls.Server(c, src.Config())
				tc.Handshake()
				tc.Close()
			}()
		}
	}()
	client := ca.ClientConfig()
	client.ClientSessionCache = nil
	for b.Loop() {
		c, err := tls.Dial("tcp", ln.Addr().String(), client)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
