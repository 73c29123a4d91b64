// Package watchdog is the liveness watchdog: it tracks each model's batch runs in progress
// (Runs, fed by the batch loops) and fails liveness while one has run longer than its hang
// bound, a multiple of the model's typical run clamped to [MinHang, MaxRun], logging which
// run and why; liveness passes again once that run ends. It knows nothing of models or
// servers beyond a name, a version and a callback for its metric.
package watchdog
