package grpcapi

import (
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
)

// TestCode: refusals of an overloaded server are UNAVAILABLE (retryable), a request too large
// RESOURCE_EXHAUSTED, a client that left CANCELED, anything unknown INTERNAL.
func TestCode(t *testing.T) {
	for st, want := range map[int]codes.Code{
		http.StatusBadRequest: codes.InvalidArgument, http.StatusUnsupportedMediaType: codes.InvalidArgument,
		http.StatusRequestEntityTooLarge: codes.ResourceExhausted, http.StatusNotFound: codes.NotFound,
		http.StatusMethodNotAllowed: codes.NotFound, http.StatusRequestTimeout: codes.DeadlineExceeded,
		http.StatusGatewayTimeout: codes.DeadlineExceeded, http.StatusTooManyRequests: codes.Unavailable,
		http.StatusServiceUnavailable: codes.Unavailable, statusClientClosed: codes.Canceled,
		http.StatusInternalServerError: codes.Internal, 418: codes.Internal,
	} {
		if got := Code(st); got != want {
			t.Errorf("Code(%d) = %v, want %v", st, got, want)
		}
	}
}
