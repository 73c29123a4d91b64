package grpcapi

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/gateway/internal/wire"
)

// Health is grpc.health.v1.Health for the server ("") and for GRPCInferenceService: SERVING
// while Serving reports true, NOT_SERVING otherwise.
type Health struct {
	healthgrpc.UnimplementedHealthServer
	// Serving reports whether the server serves (ready, live and not draining).
	Serving func() bool
	// Stop is closed when the server drains past its delay: Watch calls end then.
	Stop <-chan struct{}
}

func (h *Health) status(service string) (healthgrpc.HealthCheckResponse_ServingStatus, bool) {
	if service != "" && service != inference.GRPCInferenceService_ServiceDesc.ServiceName {
		return healthgrpc.HealthCheckResponse_SERVICE_UNKNOWN, false
	}
	if h.Serving() {
		return healthgrpc.HealthCheckResponse_SERVING, true
	}
	return healthgrpc.HealthCheckResponse_NOT_SERVING, true
}

func (h *Health) Check(_ context.Context, req *healthgrpc.HealthCheckRequest) (*healthgrpc.HealthCheckResponse, error) {
	st, ok := h.status(req.GetService())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "unknown service %q", wire.Truncate(req.GetService(), 100))
	}
	return &healthgrpc.HealthCheckResponse{Status: st}, nil
}

// Watch sends the service's status, and again each time it changes (looked at every
// healthWatchPeriod), until the call ends or the server drains past its delay.
func (h *Health) Watch(req *healthgrpc.HealthCheckRequest, st healthgrpc.Health_WatchServer) error {
	t := time.NewTicker(healthWatchPeriod)
	defer t.Stop()
	last := healthgrpc.HealthCheckResponse_ServingStatus(-1)
	for {
		cur, _ := h.status(req.GetService())
		if cur != last {
			if err := st.Send(&healthgrpc.HealthCheckResponse{Status: cur}); err != nil {
				return err
			}
			last = cur
		}
		select {
		case <-t.C:
		case <-st.Context().Done():
			return nil
		case <-h.Stop:
			return status.Error(codes.Unavailable, "the server is shutting down")
		}
	}
}

const healthWatchPeriod = 250 * time.Millisecond
