package grpcapi

import (
	"math"
	"net/http"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/imagegate/imagegate/api/inference"
)

// statusClientClosed is the pipeline's status for a request whose client left (nginx's 499).
const statusClientClosed = 499

// Code maps the pipeline's status (its classification, in HTTP's vocabulary) to a gRPC code.
// Every refusal of an overloaded or draining server is UNAVAILABLE, whatever
// server.queue_full_status says: it is the code gRPC clients and their retry policies treat as
// transient (and the one Triton answers a full queue with). RESOURCE_EXHAUSTED is kept for a
// request too large for the server's bounds (as grpc-go answers a message over its size
// limit): retrying it does not help.
func Code(httpStatus int) codes.Code {
	switch httpStatus {
	case http.StatusBadRequest, http.StatusUnsupportedMediaType:
		return codes.InvalidArgument
	case http.StatusRequestEntityTooLarge:
		return codes.ResourceExhausted
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return codes.NotFound
	case http.StatusRequestTimeout, http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return codes.Unavailable
	case statusClientClosed:
		return codes.Canceled
	}
	return codes.Internal
}

// HTTPStatus is the pipeline's status (HTTP's vocabulary) of a gRPC code: Code's inverse, for
// counting a call's outcome as HTTP's are.
func HTTPStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.NotFound:
		return http.StatusNotFound
	case codes.ResourceExhausted:
		return http.StatusRequestEntityTooLarge
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.Canceled:
		return statusClientClosed
	}
	return http.StatusInternalServerError
}

// Error is a status error with httpStatus's code (Code) and msg.
func Error(httpStatus int, msg string) error {
	return status.Error(Code(httpStatus), msg)
}

// ParamInt reads an integer parameter (int64_param or uint64_param).
func ParamInt(p *inference.InferParameter) (int64, bool) {
	switch v := p.GetParameterChoice().(type) {
	case *inference.InferParameter_Int64Param:
		return v.Int64Param, true
	case *inference.InferParameter_Uint64Param:
		if v.Uint64Param > math.MaxInt64 {
			return 0, false
		}
		return int64(v.Uint64Param), true
	}
	return 0, false
}

// ParamText is a parameter's value as its text, as a JSON request spells it: a string as it
// is, a number in decimal, a boolean true or false; ok is false for an unset parameter.
func ParamText(p *inference.InferParameter) (string, bool) {
	switch v := p.GetParameterChoice().(type) {
	case *inference.InferParameter_StringParam:
		return v.StringParam, true
	case *inference.InferParameter_BoolParam:
		return strconv.FormatBool(v.BoolParam), true
	case *inference.InferParameter_Int64Param:
		return strconv.FormatInt(v.Int64Param, 10), true
	case *inference.InferParameter_Uint64Param:
		return strconv.FormatUint(v.Uint64Param, 10), true
	case *inference.InferParameter_DoubleParam:
		return strconv.FormatFloat(v.DoubleParam, 'g', -1, 64), true
	}
	return "", false
}
