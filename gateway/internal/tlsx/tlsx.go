package tlsx

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// ClientAuth is what a listener asks of its clients' certificates (mutual TLS).
type ClientAuth int

const (
	// NoClientCert asks for none.
	NoClientCert ClientAuth = iota
	// OptionalClientCert verifies a certificate a client sends against the client CA, and
	// lets a client without one through.
	OptionalClientCert
	// RequireClientCert refuses the handshake of a client without a certificate the client
	// CA signed.
	RequireClientCert
)

// Files name a listener's certificate, key and client CA, and its settings.
type Files struct {
	// Cert is a PEM file of the server's certificate, followed by its intermediates.
	Cert string
	// Key is the PEM file of the certificate's private key.
	Key string
	// ClientCA, when set, is a PEM file of the CAs whose client certificates are accepted.
	ClientCA string
	// ClientAuth needs ClientCA unless it is NoClientCert.
	ClientAuth ClientAuth
	// MinVersion is tls.VersionTLS12 (0 is taken as it) or tls.VersionTLS13.
	MinVersion uint16
}

// maxFile bounds a certificate, key or CA file (a chain of a few certificates is kilobytes).
const maxFile = 1 << 20

// Source is one listener's TLS configuration, from Files. Safe for concurrent use.
type Source struct {
	files  Files
	protos []string
	now    func() time.Time // tests
	cur    atomic.Pointer[state]
	mu     sync.Mutex // serializes Reload
	// refused is the digest of the files' contents last refused: the same contents are not
	// reported again at every poll.
	refused [sha256.Size]byte
}

// state is what a handshake uses: a configuration built from one reading of the files.
type state struct {
	cfg    *tls.Config
	digest [sha256.Size]byte
	leaf   *x509.Certificate
}

// New loads f for a listener that negotiates nextProtos with ALPN ("http/1.1", or "h2" for
// gRPC); it fails when the files do not make a valid configuration.
func New(f Files, nextProtos []string) (*Source, error) {
	if f.MinVersion == 0 {
		f.MinVersion = tls.VersionTLS12
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	s := &Source{files: f, protos: nextProtos, now: time.Now}
	st, err := s.load()
	if err != nil {
		return nil, err
	}
	s.cur.Store(st)
	return s, nil
}

func (f Files) validate() error {
	switch {
	case f.Cert == "" || f.Key == "":
		return errors.New("tlsx: a certificate file and a key file are both needed")
	case f.MinVersion != tls.VersionTLS12 && f.MinVersion != tls.VersionTLS13:
		return fmt.Errorf("tlsx: the minimum version must be TLS 1.2 or 1.3, got %#x", f.MinVersion)
	case f.ClientAuth != NoClientCert && f.ClientCA == "":
		return errors.New("tlsx: client certificates need a client CA file")
	case f.ClientAuth == NoClientCert && f.ClientCA != "":
		return errors.New("tlsx: a client CA file is set but client certificates are not asked for")
	}
	return nil
}

// Config is the configuration a listener serves with: every handshake takes the current
// state's. It is the same value for the Source's life.
func (s *Source) Config() *tls.Config {
	return &tls.Config{
		MinVersion: s.files.MinVersion,
		NextProtos: s.protos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load().cfg, nil
		},
	}
}

// Leaf is the certificate served now.
func (s *Source) Leaf() *x509.Certificate { return s.cur.Load().leaf }

// Files are the files the Source reads.
func (s *Source) Files() Files { return s.files }

// Reload reads the files again. It installs what they hold when it differs from what is served
// and makes a valid configuration (changed true); when it does not, the configuration served
// stays and err says why, once for the same contents (a poll that finds them again reports
// nothing).
func (s *Source) Reload() (changed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	raw, digest, err := s.read()
	if err != nil {
		return false, s.refuse(sha256.Sum256([]byte(err.Error())), err)
	}
	if digest == s.cur.Load().digest {
		s.refused = [sha256.Size]byte{}
		return false, nil
	}
	st, err := s.build(raw, digest)
	if err != nil {
		return false, s.refuse(digest, err)
	}
	s.refused = [sha256.Size]byte{}
	s.cur.Store(st)
	return true, nil
}

// refuse reports err unless the same contents (digest) were refused last.
func (s *Source) refuse(digest [sha256.Size]byte, err error) error {
	if digest == s.refused {
		return nil
	}
	s.refused = digest
	return err
}

// files' contents, in order: certificate, key, client CA.
type contents [3][]byte

func (s *Source) read() (contents, [sha256.Size]byte, error) {
	var c contents
	h := sha256.New()
	for i, p := range []string{s.files.Cert, s.files.Key, s.files.ClientCA} {
		if p == "" {
			continue
		}
		b, err := readFile(p)
		if err != nil {
			return c, [sha256.Size]byte{}, err
		}
		c[i] = b
		fmt.Fprintf(h, "%d:%d:", i, len(b))
		h.Write(b)
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return c, d, nil
}

func (s *Source) load() (*state, error) {
	raw, digest, err := s.read()
	if err != nil {
		return nil, err
	}
	return s.build(raw, digest)
}

// build makes a state from the files' contents, checking that the key is the certificate's,
// that the certificate is within its validity period, and that the client CA file holds a
// certificate.
func (s *Source) build(c contents, digest [sha256.Size]byte) (*state, error) {
	pair, err := tls.X509KeyPair(c[0], c[1])
	if err != nil {
		return nil, fmt.Errorf("tlsx: %s and %s do not make a certificate and its key: %w", s.files.Cert, s.files.Key, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tlsx: %s: %w", s.files.Cert, err)
		}
	}
	if now := s.now(); now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("tlsx: %s is valid from %s to %s, not now (%s)", s.files.Cert,
			leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{pair},
		MinVersion:   s.files.MinVersion,
		NextProtos:   s.protos,
	}
	if s.files.ClientCA != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c[2]) {
			return nil, fmt.Errorf("tlsx: %s holds no PEM certificate", s.files.ClientCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
		if s.files.ClientAuth == RequireClientCert {
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return &state{cfg: cfg, digest: digest, leaf: leaf}, nil
}

// readFile reads a regular file of at most maxFile bytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tlsx: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("tlsx: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("tlsx: %s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, fmt.Errorf("tlsx: %s: %w", path, err)
	}
	if len(b) > maxFile {
		return nil, fmt.Errorf("tlsx: %s holds more than %d bytes", path, maxFile)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("tlsx: %s is empty", path)
	}
	return b, nil
}
