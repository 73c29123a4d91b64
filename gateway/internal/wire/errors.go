package wire

import (
	"errors"
	"fmt"
)

// ErrMalformed is wrapped by every error about what a client sent. Its text is the gateway's
// own: these errors reach clients as the gateway's 400 answers.
var ErrMalformed = errors.New("gateway: bad request")

// Malformed returns an error wrapping ErrMalformed, with the message format and args.
func Malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// Truncate shortens s to n bytes and an ellipsis, for quoting what a client sent.
func Truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
