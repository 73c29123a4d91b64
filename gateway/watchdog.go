package gateway

import "github.com/imagegate/imagegate/gateway/internal/watchdog"

// The liveness watchdog (internal/watchdog) fails liveness while a model's batch run has run
// longer than its hang bound; each model's batch loops report their runs to it (model.go).

// WatchdogOptions bound a batch run before the server stops reporting live: RunMultiple
// times the model's typical run, within [MinHang, MaxRun]. Zero fields take their defaults
// (DefaultWatchdog).
type WatchdogOptions = watchdog.Options

// DefaultWatchdog is the watchdog's default (server.watchdog's keys).
var DefaultWatchdog = watchdog.Default

// Live reports whether the server is live: false while a batch run is hung (see the
// watchdog), with the reason. It is what /v2/health/live answers, for any transport's health
// check.
func (s *Server) Live() (bool, string) { return s.dog.Live() }
