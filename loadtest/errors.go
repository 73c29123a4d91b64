package loadtest

import (
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"

	"github.com/valyala/fasthttp"
)

// errKind is the closed set of transport failures a request can end in.
type errKind uint8

const (
	kindNone    errKind = iota
	kindTimeout         // the request did not finish within Config.Timeout
	kindConnect         // the connection could not be opened (refused, unreachable)
	kindClosed          // the server closed or reset the connection before a full response
	kindOther           // anything else (malformed response, ...)
	numKinds
)

var kindNames = [numKinds]string{"", "timeout", "connect", "closed", "other"}

func (k errKind) String() string { return kindNames[k] }

// classify maps a client error to its kind.
func classify(err error) errKind {
	var ne net.Error
	var op *net.OpError
	switch {
	case err == nil:
		return kindNone
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout),
		errors.Is(err, fasthttp.ErrTLSHandshakeTimeout),
		errors.As(err, &ne) && ne.Timeout():
		return kindTimeout
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EADDRNOTAVAIL),
		errors.As(err, &op) && op.Op == "dial":
		return kindConnect
	case errors.Is(err, fasthttp.ErrConnectionClosed), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		return kindClosed
	default:
		return kindOther
	}
}

// statusClass names a non-2xx status code's class, e.g. "status_5xx".
func statusClass(code int) string {
	if code < 100 || code > 599 {
		return "status_other"
	}
	return "status_" + strconv.Itoa(code/100) + "xx"
}
