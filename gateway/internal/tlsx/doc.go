// Package tlsx serves a listener's TLS configuration from certificate and key files that change
// while the server runs: a Source loads them once (New), hands listeners a tls.Config whose
// GetConfigForClient reads the current state (an atomically swapped pointer, so a handshake
// never waits for a reload), and Reload reads the files again, installing a new state only
// when they changed and hold a valid pair. A pair that does not load (a key that does not
// match its certificate, a half-written file, a certificate out of its validity period, a
// client CA file without a certificate) is refused and the state in use keeps serving. It
// imports nothing of this module.
package tlsx
