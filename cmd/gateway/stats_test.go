package main_test

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"
)

// tritonStats is Triton's statistics extension's JSON, as its clients read it.
type tritonStats struct {
	ModelStats []struct {
		Name           string `json:"name"`
		Version        string `json:"version"`
		LastInference  uint64 `json:"last_inference"`
		InferenceCount uint64 `json:"inference_count"`
		ExecutionCount uint64 `json:"execution_count"`
		InferenceStats map[string]struct {
			Count uint64 `json:"count"`
			Ns    uint64 `json:"ns"`
		} `json:"inference_stats"`
		BatchStats []struct {
			BatchSize    uint64 `json:"batch_size"`
			ComputeInfer struct {
				Count uint64 `json:"count"`
				Ns    uint64 `json:"ns"`
			} `json:"compute_infer"`
		} `json:"batch_stats"`
	} `json:"model_stats"`
}

// TestStatisticsExtension: after concurrent requests with real images on the real model (one
// and two images each) and a failed one, the model's statistics count them as Triton's
// extension says, agree with /metrics, and are served for the model, its version and every
// model; unknown names are 404.
func TestStatisticsExtension(t *testing.T) {
	g := startGateway(t, "models:\n"+defaultModelYAML(t, "{max_batch_size: 4, max_queue_delay: 5ms}"))
	const model = "mobilenet_v3_small"
	get := func(path string) tritonStats {
		t.Helper()
		a := g.do("GET", path, "", nil)
		var s tritonStats
		if a.status != 200 || json.Unmarshal(a.body, &s) != nil {
			t.Fatalf("GET %s: %d %s", path, a.status, a.body)
		}
		return s
	}
	var md struct{ Extensions []string }
	if a := g.do("GET", "/v2", "", nil); json.Unmarshal(a.body, &md) != nil || !slices.Contains(md.Extensions, "statistics") {
		t.Fatalf("GET /v2: %s", a.body)
	}
	if s := get("/v2/models/" + model + "/stats"); len(s.ModelStats) != 1 || s.ModelStats[0].InferenceCount != 0 || s.ModelStats[0].LastInference != 0 {
		t.Fatalf("before any request (warm-up runs are not inferences): %+v", s)
	}

	ps := payloads(t)[:8]
	png := testPNG(t)
	pair, _ := json.Marshal(map[string]any{"inputs": []any{map[string]any{"name": "input", "shape": []int{2}, "datatype": "BYTES",
		"data": []string{base64.StdEncoding.EncodeToString(png), base64.StdEncoding.EncodeToString(png)}}}})
	const singles, pairs = 16, 3
	before := uint64(time.Now().UnixMilli())
	var wg sync.WaitGroup
	for i := range singles + pairs {
		wg.Go(func() {
			var a answer
			if i < singles {
				p := ps[i%len(ps)]
				a = g.do("POST", "/predict/", p.contentType, p.body)
			} else {
				a = g.do("POST", "/v2/models/"+model+"/infer", "application/json", pair)
			}
			if a.status != 200 {
				t.Errorf("request %d: %d %s", i, a.status, a.body)
			}
		})
	}
	wg.Wait()
	if a := g.do("POST", "/predict/", "text/plain", []byte("not an image")); a.status != 415 {
		t.Fatalf("a text body: %d %s", a.status, a.body)
	}

	s := get("/v2/models/" + model + "/stats")
	if len(s.ModelStats) != 1 {
		t.Fatalf("%+v", s)
	}
	ms := s.ModelStats[0]
	st := ms.InferenceStats
	if ms.Name != model || ms.Version != "1" || st["success"].Count != singles+pairs || st["fail"].Count != 1 || st["fail"].Ns == 0 {
		t.Errorf("name %s, version %s, success %+v, fail %+v; want %d successes, 1 failure", ms.Name, ms.Version, st["success"], st["fail"], singles+pairs)
	}
	if ms.InferenceCount != singles+2*pairs {
		t.Errorf("inference_count %d, want %d samples", ms.InferenceCount, singles+2*pairs)
	}
	var samples, execs uint64
	for _, b := range ms.BatchStats {
		samples += b.BatchSize * b.ComputeInfer.Count
		execs += b.ComputeInfer.Count
		if b.BatchSize < 1 || b.BatchSize > 4 || b.ComputeInfer.Ns == 0 {
			t.Errorf("batch_stats entry %+v", b)
		}
	}
	if samples != ms.InferenceCount || execs != ms.ExecutionCount {
		t.Errorf("batch_stats: %d samples in %d executions; inference_count %d, execution_count %d", samples, execs, ms.InferenceCount, ms.ExecutionCount)
	}
	if b := g.metric("gateway_batches_total", `model="`+model+`"`); b != float64(ms.ExecutionCount) {
		t.Errorf("execution_count %d, gateway_batches_total %v", ms.ExecutionCount, b)
	}
	if b := g.metric("gateway_batch_items_total", `model="`+model+`"`); b != float64(ms.InferenceCount) {
		t.Errorf("inference_count %d, gateway_batch_items_total %v", ms.InferenceCount, b)
	}
	var parts uint64
	for _, k := range []string{"queue", "compute_input", "compute_infer", "compute_output"} {
		if st[k].Count != st["success"].Count || st[k].Ns == 0 {
			t.Errorf("%s: %+v (success %+v)", k, st[k], st["success"])
		}
		parts += st[k].Ns
	}
	if parts > st["success"].Ns {
		t.Errorf("queue and compute sum to %d ns, more than the requests' %d ns", parts, st["success"].Ns)
	}
	if ms.LastInference < before || ms.LastInference > uint64(time.Now().UnixMilli()) {
		t.Errorf("last_inference %d, not between %d and now", ms.LastInference, before)
	}

	if v := get("/v2/models/" + model + "/versions/1/stats"); len(v.ModelStats) != 1 || v.ModelStats[0].InferenceCount != ms.InferenceCount {
		t.Errorf("version 1: %+v", v)
	}
	if all := get("/v2/models/stats"); len(all.ModelStats) != 1 || all.ModelStats[0].Name != model {
		t.Errorf("every model: %+v", all)
	}
	for _, p := range []string{"/v2/models/nope/stats", "/v2/models/" + model + "/versions/2/stats"} {
		a := g.do("GET", p, "", nil)
		var e struct{ Error string }
		if a.status != 404 || json.Unmarshal(a.body, &e) != nil || e.Error == "" {
			t.Errorf("GET %s: %d %s", p, a.status, a.body)
		}
	}
}
