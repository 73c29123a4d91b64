package metricset

import (
	"bytes"
	"fmt"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// help is the # HELP text of each of the gateway's families.
var help = map[string]string{
	"gateway_requests_total":                           "Inference requests (/predict, /models/M/predict, /v2/models/M/infer, gRPC ModelInfer and each request of ModelStreamInfer) answered, by model, version and HTTP status (a gRPC answer counted as the HTTP status of its outcome); an unknown model or version counts as model _unknown (code 499: the client closed its connection; no response was written).",
	"gateway_request_success_total":                    "Inference requests answered 2xx.",
	"gateway_request_failures_total":                   "Inference requests not answered 2xx, by reason: bad_input, not_found, overloaded, queue_full, shed, draining, unavailable, timeout, canceled, internal. Unavailable: the default model of /predict/ is not loaded.",
	"gateway_request_duration_seconds":                 "Time from the request's headers to its answer.",
	"gateway_preprocess_duration_seconds":              "Decode, resize and normalize time of one image.",
	"gateway_queue_wait_seconds":                       "Time from submission to the batcher until the sample is taken into a batch.",
	"gateway_inference_duration_seconds":               "Duration of one ONNX Runtime call (a whole batch).",
	"gateway_batch_size":                               "Samples per ONNX Runtime call.",
	"gateway_batches_total":                            "ONNX Runtime calls (execution count).",
	"gateway_batch_items_total":                        "Samples run (inference count); batch_items/batches is the mean batch size.",
	"gateway_batch_errors_total":                       "ONNX Runtime calls that failed.",
	"gateway_queue_dropped_total":                      "Samples dropped before running, by reason: canceled, expired, shed, queue_full, closed, queue_time. Expired: its deadline passed while queued; queue_time: refused before the queue for batching.queue_target (server.queue_discipline predict).",
	"gateway_queue_length":                             "Samples waiting in the model's batcher queue.",
	"gateway_queue_capacity":                           "Capacity of the model's queue (batching.max_queue_size).",
	"gateway_pending_samples":                          "Samples admitted and not yet answered (decoding, queued or running).",
	"gateway_max_batch_size":                           "The model's batching.max_batch_size (for auto, the size chosen when it loaded).",
	"gateway_batch_run_per_image_seconds":              "Run time per image measured at this batch size when the model loaded (max_batch_size: auto): the curve its max_batch_size was chosen from; 0 for a size the version serving did not measure.",
	"gateway_adaptive_batch_cap":                       "Largest batch the adaptive window currently forms (the most efficient size measured).",
	"gateway_decode_workers":                           "Images decoded at once at most (server.decode_workers).",
	"gateway_decode_busy":                              "Decode workers in use.",
	"gateway_decode_waiting":                           "Requests waiting for a decode worker.",
	"gateway_decode_incoming":                          "Requests admitted for a decode and still reading their bodies (in line as much as the waiters).",
	"gateway_decode_wait_predicted_seconds":            "The predicted wait for a decode worker of a request admitted now (what batching.queue_target bounds, with the batcher's wait).",
	"gateway_decode_queue_capacity":                    "Requests that may wait for a decode worker (server.decode_queue).",
	"gateway_inflight_bytes":                           "Memory held by requests in flight: bodies, decode buffers, input rows.",
	"gateway_inflight_bytes_limit":                     "The memory budget (server.max_inflight_bytes).",
	"gateway_inflight_requests":                        "Inference requests being handled.",
	"gateway_refusals_total":                           "Requests refused at once, by stage: queue, queue_time, memory, decode_queue, deadline, connections.",
	"gateway_refusal_duration_seconds":                 "Requests refused at the door (before their body: queue, queue_time, memory, decode_queue, deadline), from their arrival (headers read; gRPC: the call's tap) to the answer handed to the transport, after what was sent of the body was dropped.",
	"gateway_decode_expired_total":                     "Requests dropped after waiting for a decode worker, without their decode, by reason: queue_target, deadline, memory. Queue_target: waited past batching.queue_target during a spike (server.queue_discipline lifo); deadline: could no longer make it; memory: the decode's memory was taken meanwhile.",
	"gateway_connections":                              "Open client connections.",
	"gateway_connections_idle":                         "Open client connections waiting for their next request.",
	"gateway_connections_closed_idle_total":            "Idle keep-alive connections closed to admit a new one at server.max_connections.",
	"gateway_connections_lingering":                    "Connections closed after their answer while the client may still be sending (a refused body left unread): the rest is read and dropped, so that the client reads the answer instead of a reset.",
	"gateway_ready":                                    "1 when serving, 0 while the models load and while draining.",
	"gateway_live":                                     "1 when live, 0 while a batch run is hung (it has run longer than its bound, server.watchdog): /v2/health/live answers 503 then.",
	"gateway_hung_runs_total":                          "Batch runs found hung by the watchdog (each counted once, when it crossed its bound).",
	"gateway_run_age_seconds":                          "How long the model's oldest batch run in progress has been running (0: none runs).",
	"gateway_run_hang_bound_seconds":                   "How long a batch run of the model may run before the watchdog counts it hung (server.watchdog: run_multiple x its typical run, within [min_hang, max_run]).",
	"gateway_reloads_total":                            "Reloads of the repository (SIGHUP, repository.poll, the admin API), by result: ok, or failed (a model failed to load; what was served stays).",
	"gateway_model_load_failures_total":                "Model versions that failed to load, by model.",
	"gateway_model_instances":                          "ONNX Runtime sessions alive (every instance of every model version loaded or still closing).",
	"gateway_build_info":                               "The gateway's version (label version), always 1.",
	"gateway_key_requests_total":                       "Inference requests by API key (its name, from the key file) and HTTP status (a gRPC answer counted as its outcome's status): 403 the key may not use the model, 429 the key is over its rate or requests in flight.",
	"gateway_auth_refusals_total":                      "Requests refused for their key, by reason: missing, invalid (401; UNAUTHENTICATED), forbidden (403: a model the key may not use), rate, inflight (429: the key's limits).",
	"gateway_api_keys":                                 "Keys in the key file in use (server.api_keys.file).",
	"gateway_credential_reloads_total":                 "Reloads of changed TLS or key files (SIGHUP, server.credentials_poll, the admin API's reload), by kind (tls, api_keys) and result (ok; failed: refused, the ones in use stay).",
	"gateway_tls_certificate_expiry_timestamp_seconds": "When the certificate a listener serves expires (its NotAfter, Unix seconds).",
	"gateway_tls_handshake_failures_total":             "TLS handshakes that failed, by listener: a client refused (no client certificate, an old version), one that sent no handshake (plain text on a TLS port), or one that stalled past server.read_timeout.",
}

// LatencyBuckets are the upper bounds, in seconds, of the latency histograms.
var LatencyBuckets = []float64{0.0005, 0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30}

// RefusalBuckets are the upper bounds, in seconds, of the refusals' latency histogram: finer
// below the 25 ms a refusal is meant to take, coarser above.
var RefusalBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

// BatchBuckets are the upper bounds of a batch size histogram: powers of two below maxSize,
// then maxSize.
func BatchBuckets(maxSize int) []float64 {
	var b []float64
	for n := 1; n < maxSize; n *= 2 {
		b = append(b, float64(n))
	}
	return append(b, float64(maxSize))
}

// trackedCodes are the statuses counted by name; others count as code="other".
var trackedCodes = []int{200, 400, 404, 405, 408, 413, 415, 429, 499, 500, 503, 504}

// Write writes every series of set to w with the # HELP texts of the gateway's families.
func Write(set *metrics.Set, w *bytes.Buffer) {
	var b bytes.Buffer
	set.WritePrometheus(&b)
	// VictoriaMetrics writes "# HELP name" without text: add ours.
	for line := range bytes.Lines(b.Bytes()) {
		if name, ok := bytes.CutPrefix(line, []byte("# HELP ")); ok {
			name = bytes.TrimSpace(name)
			if h, ok := help[string(name)]; ok {
				w.WriteString("# HELP ")
				w.Write(name)
				w.WriteByte(' ')
				w.WriteString(h)
				w.WriteByte('\n')
				continue
			}
		}
		w.Write(line)
	}
}

// Requests counts one model version's requests by status code and by outcome.
type Requests struct {
	labels   string
	byCode   map[int]*metrics.Counter
	other    *metrics.Counter
	success  *metrics.Counter
	failures map[string]*metrics.Counter
	duration *metrics.PrometheusHistogram
}

// NewRequests registers the request series of labels (model="...",version="...") on set,
// with a failure counter for each of reasons.
func NewRequests(set *metrics.Set, labels string, reasons []string) *Requests {
	rm := &Requests{labels: labels, byCode: map[int]*metrics.Counter{}, failures: map[string]*metrics.Counter{}}
	for _, c := range trackedCodes {
		rm.byCode[c] = set.NewCounter(fmt.Sprintf(`gateway_requests_total{%s,code="%d"}`, labels, c))
	}
	rm.other = set.NewCounter(fmt.Sprintf(`gateway_requests_total{%s,code="other"}`, labels))
	rm.success = set.NewCounter(fmt.Sprintf(`gateway_request_success_total{%s}`, labels))
	for _, r := range reasons {
		rm.failures[r] = set.NewCounter(fmt.Sprintf(`gateway_request_failures_total{%s,reason=%q}`, labels, r))
	}
	rm.duration = set.NewPrometheusHistogramExt(fmt.Sprintf(`gateway_request_duration_seconds{%s}`, labels), LatencyBuckets)
	return rm
}

// Observe counts one answered request: its status and, when it failed, its reason.
func (rm *Requests) Observe(status int, reason string, d time.Duration) {
	if c := rm.byCode[status]; c != nil {
		c.Inc()
	} else {
		rm.other.Inc()
	}
	rm.duration.Update(d.Seconds())
	if status < 400 {
		rm.success.Inc()
		return
	}
	if c := rm.failures[reason]; c != nil {
		c.Inc()
	}
}
