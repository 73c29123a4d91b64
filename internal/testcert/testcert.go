// Package testcert makes certificates for tests of TLS: a CA, server certificates for
// loopback (127.0.0.1, ::1, localhost) and client certificates, ECDSA P-256, written as PEM
// files. Imported by tests only; it imports nothing of this module.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority of a test.
type CA struct {
	Cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	CertPEM []byte
	// File is the CA's certificate as a PEM file.
	File string
	dir  string
}

// NewCA makes a CA whose files live in t's temporary folder.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, key: key, CertPEM: pemOf("CERTIFICATE", der), dir: t.TempDir()}
	ca.File = filepath.Join(ca.dir, name+"-ca.pem")
	write(t, ca.File, ca.CertPEM)
	return ca
}

// Pool is a pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Pair is a certificate and its key, as PEM bytes and files.
type Pair struct {
	CertPEM, KeyPEM   []byte
	CertFile, KeyFile string
	Leaf              *x509.Certificate
}

// TLS is the pair for a tls.Config.
func (p Pair) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Options shape a certificate: its validity (zero: from an hour ago to a day ahead).
type Options struct {
	NotBefore, NotAfter time.Time
}

// Server issues a server certificate for 127.0.0.1, ::1 and localhost, named name.
func (ca *CA) Server(t testing.TB, name string, o ...Options) Pair {
	t.Helper()
	return ca.issue(t, name, x509.ExtKeyUsageServerAuth, o)
}

// Client issues a client certificate named name.
func (ca *CA) Client(t testing.TB, name string, o ...Options) Pair {
	t.Helper()
	return ca.issue(t, name, x509.ExtKeyUsageClientAuth, o)
}

func (ca *CA) issue(t testing.TB, name string, usage x509.ExtKeyUsage, o []Options) Pair {
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	if len(o) > 0 && !o[0].NotAfter.IsZero() {
		tmpl.NotBefore, tmpl.NotAfter = o[0].NotBefore, o[0].NotAfter
	}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := Pair{CertPEM: pemOf("CERTIFICATE", der), KeyPEM: pemOf("PRIVATE KEY", kder), Leaf: leaf,
		CertFile: filepath.Join(ca.dir, name+".crt"), KeyFile: filepath.Join(ca.dir, name+".key")}
	write(t, p.CertFile, p.CertPEM)
	write(t, p.KeyFile, p.KeyPEM)
	return p
}

// ClientConfig is a client's TLS configuration trusting the CA, with certs as its own.
func (ca *CA) ClientConfig(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: ca.Pool(), Certificates: certs, MinVersion: tls.VersionTLS12}
}

// ClientHello is the first flight of Go's TLS client trusting ca (for localhost): the bytes a
// test sends to a listener to begin a handshake it never finishes.
func (ca *CA) ClientHello() []byte {
	a, b := net.Pipe()
	defer a.Close()
	got := make(chan []byte, 1)
	go func() {
		buf := make([]byte, 4096)
		n, _ := b.Read(buf)
		got <- buf[:n]
		b.Close()
	}()
	cfg := ca.ClientConfig()
	cfg.ServerName = "localhost"
	tls.Client(a, cfg).Handshake()
	return <-got
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// write writes a file atomically (a rename), as a Secret mount's update or an operator's mv
// replaces it.
func write(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Install copies the pair's files to certFile and keyFile, each replaced by a rename.
func (p Pair) Install(t testing.TB, certFile, keyFile string) {
	t.Helper()
	write(t, certFile, p.CertPEM)
	write(t, keyFile, p.KeyPEM)
}
