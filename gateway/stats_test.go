package gateway

import (
	"encoding/base64"
	"encoding/json"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/imagegate/imagegate/batcher"
)

// statsReply is Triton's statistics JSON, decoded.
type statsReply struct {
	ModelStats []ModelStats `json:"model_stats"`
}

func (ts *testServer) stats(path string) statsReply {
	ts.t.Helper()
	r := ts.do("GET", path, "", nil)
	var sr statsReply
	if r.status != 200 || json.Unmarshal(r.body, &sr) != nil {
		ts.t.Fatalf("GET %s: %d %s", path, r.status, r.body)
	}
	return sr
}

// checkStats holds what every model version's statistics must: success counts the queue and
// compute entries, the samples of batch_stats make inference_count, the executions of
// batch_stats make execution_count, and a request's stages fit in its time.
func checkStats(t *testing.T, ms ModelStats) {
	t.Helper()
	st := ms.InferenceStats
	var samples, execs uint64
	for _, b := range ms.BatchStats {
		if b.ComputeInput.Count != b.ComputeInfer.Count || b.ComputeInfer.Count != b.ComputeOutput.Count || b.ComputeInfer.Count == 0 {
			t.Errorf("%s/%s: batch size %d: counts %+v", ms.Name, ms.Version, b.BatchSize, b)
		}
		samples += b.BatchSize * b.ComputeInfer.Count
		execs += b.ComputeInfer.Count
	}
	if samples != ms.InferenceCount || execs != ms.ExecutionCount {
		t.Errorf("%s/%s: batch_stats hold %d samples in %d executions; inference_count %d, execution_count %d",
			ms.Name, ms.Version, samples, execs, ms.InferenceCount, ms.ExecutionCount)
	}
	n := st.Success.Count
	for name, d := range map[string]uint64{"queue": st.Queue.Count, "compute_input": st.ComputeInput.Count,
		"compute_infer": st.ComputeInfer.Count, "compute_output": st.ComputeOutput.Count} {
		if d != n {
			t.Errorf("%s/%s: %s count %d, success count %d", ms.Name, ms.Version, name, d, n)
		}
	}
	if n > 0 {
		parts := st.Queue.Ns + st.ComputeInput.Ns + st.ComputeInfer.Ns + st.ComputeOutput.Ns
		if st.Success.Ns == 0 || st.ComputeInfer.Ns == 0 || parts > st.Success.Ns {
			t.Errorf("%s/%s: success %d ns; queue, compute input, infer, output %d+%d+%d+%d ns", ms.Name, ms.Version,
				st.Success.Ns, st.Queue.Ns, st.ComputeInput.Ns, st.ComputeInfer.Ns, st.ComputeOutput.Ns)
		}
	}
}

// TestStatistics: concurrent requests to two versions of a model (one- and two-image
// requests) and a failed one are counted as Triton's statistics extension says; the paths
// for every model, a model, a version and the tensor interface; unknown names are 404.
func TestStatistics(t *testing.T) {
	v1 := modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)})
	v1.Batching = batcher.Config{MaxBatchSize: 4, MaxQueueSize: 64, MaxQueueDelay: 2 * time.Millisecond}
	v2 := v1
	v2.Runners, v2.Version = RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)}, "2"
	o := testOptions()
	o.DecodeQueue = 64 // every request is admitted
	ts := newTestServer(t, o, v1, v2)

	if sr := ts.stats("/v2/models/m/stats"); len(sr.ModelStats) != 2 || sr.ModelStats[0].LastInference != 0 || len(sr.ModelStats[1].BatchStats) != 0 {
		t.Fatalf("before any request: %+v", sr)
	}
	img := solidPNG(t, 20, 10, 100)
	b64 := base64.StdEncoding.EncodeToString(img)
	two := []byte(`{"inputs":[{"name":"input","shape":[2],"datatype":"BYTES","data":["` + b64 + `","` + b64 + `"]}]}`)
	before := time.Now().UnixMilli()
	const single, pairs = 24, 6
	var wg sync.WaitGroup
	for i := range single + pairs {
		wg.Go(func() {
			var r reply
			if i < single {
				r = ts.do("POST", "/models/m/predict", "image/png", img) // the newest version, 2
			} else {
				r = ts.do("POST", "/v2/models/m/versions/1/infer", "application/json", two)
			}
			if r.status != 200 {
				t.Errorf("request %d: %d %s", i, r.status, r.body)
			}
		})
	}
	wg.Wait()
	if r := ts.do("POST", "/models/m/predict", "text/plain", []byte("not an image")); r.status != 415 {
		t.Fatalf("a text body: %d %s", r.status, r.body)
	}

	sr := ts.stats("/v2/models/m/stats")
	if len(sr.ModelStats) != 2 || sr.ModelStats[0].Version != "1" || sr.ModelStats[1].Version != "2" {
		t.Fatalf("every version, oldest first: %+v", sr)
	}
	for i, want := range []struct{ success, fail, samples uint64 }{{pairs, 0, 2 * pairs}, {single, 1, single}} {
		ms := sr.ModelStats[i]
		checkStats(t, ms)
		st := ms.InferenceStats
		if ms.Name != "m" || st.Success.Count != want.success || st.Fail.Count != want.fail || ms.InferenceCount != want.samples {
			t.Errorf("version %s: success %d, fail %d, inference_count %d; want %+v", ms.Version, st.Success.Count, st.Fail.Count, ms.InferenceCount, want)
		}
		if want.fail > 0 && st.Fail.Ns == 0 {
			t.Errorf("version %s: fail %+v", ms.Version, st.Fail)
		}
		if ms.LastInference < uint64(before) || ms.LastInference > uint64(time.Now().UnixMilli()) {
			t.Errorf("version %s: last_inference %d, not between %d and now", ms.Version, ms.LastInference, before)
		}
		// The execution count is the batches the metrics counted.
		if got := ts.metric(`gateway_batches_total{model="m",version="` + ms.Version + `"}`); got != float64(ms.ExecutionCount) {
			t.Errorf("version %s: execution_count %d, gateway_batches_total %v", ms.Version, ms.ExecutionCount, got)
		}
	}

	// One version; the tensor interface (the same counters, under its name); every model.
	if v := ts.stats("/v2/models/m/versions/1/stats"); len(v.ModelStats) != 1 || v.ModelStats[0].Version != "1" ||
		v.ModelStats[0].InferenceStats.Success.Count != pairs {
		t.Errorf("version 1: %+v", v)
	}
	if v := ts.stats("/v2/models/m.tensor/versions/2/stats"); len(v.ModelStats) != 1 || v.ModelStats[0].Name != "m.tensor" ||
		v.ModelStats[0].InferenceStats.Success.Count != single {
		t.Errorf("the tensor interface: %+v", v)
	}
	if all := ts.stats("/v2/models/stats"); len(all.ModelStats) != 2 || all.ModelStats[1].InferenceStats != sr.ModelStats[1].InferenceStats {
		t.Errorf("every model: %+v", all)
	}
	var md struct{ Extensions []string }
	if r := ts.do("GET", "/v2", "", nil); json.Unmarshal(r.body, &md) != nil || !slices.Contains(md.Extensions, "statistics") {
		t.Errorf("GET /v2: %s", r.body)
	}
	// Unknown names: 404 with the error object of every v2 endpoint; other methods: 405.
	for _, p := range []string{"/v2/models/nope/stats", "/v2/models/m/versions/9/stats", "/v2/models/nope.tensor/stats"} {
		r := ts.do("GET", p, "", nil)
		var e struct{ Error string }
		if r.status != 404 || json.Unmarshal(r.body, &e) != nil || e.Error == "" {
			t.Errorf("GET %s: %d %s", p, r.status, r.body)
		}
	}
	if r := ts.do("POST", "/v2/models/m/stats", "", nil); r.status != 405 || r.header["Allow"] != "GET" {
		t.Errorf("POST stats: %d %v", r.status, r.header)
	}
	// The admin listener, whose /v2 lists the extension too, serves it.
	ln := fasthttputil.NewInmemoryListener()
	go ts.s.ServeAdmin(ln)
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	status, body, err := c.Get(nil, "http://admin/v2/models/m/versions/1/stats")
	ln.Close()
	if err != nil || status != 200 || !strings.Contains(string(body), `"model_stats":[{"name":"m","version":"1"`) {
		t.Errorf("stats on the admin listener: %d %s %v", status, body, err)
	}
	if _, err := ts.s.Stats("", "1"); err == nil {
		t.Error("a version without a model name was accepted")
	}
}
