package main_test

import (
	"context"
	"slices"
	"sync"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/loadtest/oip"
	"github.com/imagegate/imagegate/loadtest/oipgrpc"
)

// The checks tritonclient.grpc's users make, with the project's gRPC client (the same
// generated code, tritonclient's defaults) against the real gateway serving the shared
// ImageNet classifier: health, metadata and configuration, inference with raw contents,
// classification, 16 concurrent inferences giving the scores of one, async inference,
// NOT_FOUND for an unknown model, the streaming API. References are the same server's HTTP
// answers, computed here.

func (g *gateway) grpcClient(t *testing.T) *oipgrpc.Client {
	t.Helper()
	g.mu.Lock()
	addr := g.grpc
	g.mu.Unlock()
	if addr == "" {
		t.Fatalf("the gateway does not serve gRPC:\n%s", g.log())
	}
	c, err := oipgrpc.Dial(addr, oipgrpc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestGRPCClientRoundTrip(t *testing.T) {
	g := startGateway(t, "models:\n"+imagenetModelYAML(t, "{max_batch_size: 4, max_queue_delay: 2ms}"))
	c := g.grpcClient(t)
	ctx := t.Context()
	h, err := healthgrpc.NewHealthClient(c.Conn()).Check(ctx, &healthgrpc.HealthCheckRequest{})
	if err != nil || h.Status != healthgrpc.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
	for name, f := range map[string]func() (bool, error){
		"live":        func() (bool, error) { return c.ServerLive(ctx) },
		"ready":       func() (bool, error) { return c.ServerReady(ctx) },
		"model ready": func() (bool, error) { return c.ModelReady(ctx, "mobilenetv2", "1") },
	} {
		if ok, err := f(); !ok || err != nil {
			t.Fatalf("%s: %v %v", name, ok, err)
		}
	}
	if ok, err := c.ModelReady(ctx, "nope", ""); ok || err != nil {
		t.Fatalf("an unknown model is ready: %v %v", ok, err)
	}
	md, err := c.ModelMetadata(ctx, "mobilenetv2", "")
	if err != nil || md.Name != "mobilenetv2" || md.Inputs[0].Datatype != "BYTES" || !slices.Equal(md.Outputs[0].Shape, []int64{-1, 1000}) {
		t.Fatalf("model metadata: %v %v", md, err)
	}
	cfg, err := c.ModelConfig(ctx, "mobilenetv2", "")
	if err != nil || cfg.MaxBatchSize%4 != 0 || cfg.Input[0].DataType != inference.DataType_TYPE_STRING || cfg.Output[0].Dims[0] != 1000 {
		t.Fatalf("model config: %v %v", cfg, err)
	}
	input, output := md.Inputs[0].Name, md.Outputs[0].Name
	photos := sharedPhotos(t, "skimage_coffee.png", "skimage_chelsea_cat.png", "skimage_rocket.jpg")
	infer := func(imgs ...[]byte) *oip.Response {
		t.Helper()
		r, err := c.Infer(ctx, "mobilenetv2", "", &oip.Request{ID: "one", Inputs: []oip.Input{oip.ImageInput(input, true, imgs...)}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Raw contents: the softmax of the scores is the article API's answer for each photo.
	r := infer(photos...)
	scores := r.Output(output)
	if r.ID != "one" || scores == nil || !slices.Equal(scores.Shape, []int64{3, 1000}) {
		t.Fatalf("response %+v", r)
	}
	for i, p := range photos {
		if d := maxDiff(softmax64(scores.Row(i)), articleScores(t, g, p)); d > 1e-4 {
			t.Fatalf("photo %d: gRPC's scores differ from the article API's by %g", i, d)
		}
	}
	one := scores.Row(0)
	// Classification: coffee's best class is espresso.
	cr, err := c.Infer(ctx, "mobilenetv2", "", &oip.Request{Inputs: []oip.Input{oip.ImageInput(input, true, photos[0])},
		Outputs: []oip.Output{{Name: output, Classification: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := cr.Output(output).Classes()
	if err != nil || len(rows) != 1 || len(rows[0]) != 3 || rows[0][0].Index != 967 || rows[0][0].Label != "espresso" {
		t.Fatalf("classes %v %v", rows, err)
	}
	// 16 concurrent inferences give the scores of one.
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			r, err := c.Infer(ctx, "mobilenetv2", "", &oip.Request{Inputs: []oip.Input{oip.ImageInput(input, true, photos[0])}})
			if err != nil {
				t.Error(err)
				return
			}
			if d := maxDiff(r.Output(output).Row(0), one); d > 1e-3 {
				t.Errorf("a concurrent inference's scores differ from one alone's by %g", d)
			}
		})
	}
	wg.Wait()
	// Async inference.
	done := make(chan error, 1)
	if err := c.AsyncInfer(ctx, "mobilenetv2", "", &oip.Request{Inputs: []oip.Input{oip.ImageInput(input, true, photos[1])}}, func(r *oip.Response, err error) {
		if err == nil && argmax(r.Output(output).Row(0)) != argmax(scores.Row(1)) {
			err = context.Canceled
		}
		done <- err
	}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("async: %v", err)
	}
	// NOT_FOUND for an unknown model or version.
	if _, err := c.Infer(ctx, "nope", "", &oip.Request{Inputs: []oip.Input{oip.ImageInput(input, true, photos[0])}}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown model: %v", err)
	}
	if _, err := c.Infer(ctx, "mobilenetv2", "7", &oip.Request{Inputs: []oip.Input{oip.ImageInput(input, true, photos[0])}}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown version: %v", err)
	}
	// The streaming API: answers matched by id; a failed request answered on the stream.
	st, err := c.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i, p := range photos {
		wg.Go(func() {
			r, err := st.Infer(ctx, "mobilenetv2", "", &oip.Request{ID: "s" + string(rune('0'+i)), Inputs: []oip.Input{oip.ImageInput(input, true, p)}})
			if err != nil {
				t.Error(err)
				return
			}
			if argmax(r.Output(output).Row(0)) != argmax(scores.Row(i)) {
				t.Errorf("stream request %d: another answer", i)
			}
		})
	}
	wg.Wait()
	var se *oipgrpc.StreamError
	if _, err := st.Infer(ctx, "nope", "", &oip.Request{ID: "bad", Inputs: []oip.Input{oip.ImageInput(input, true, photos[0])}}); !asStreamError(err, &se) {
		t.Fatalf("a failed request on the stream: %v", err)
	}
	if _, err := st.Infer(ctx, "mobilenetv2", "", &oip.Request{ID: "after", Inputs: []oip.Input{oip.ImageInput(input, true, photos[0])}}); err != nil {
		t.Fatalf("the stream after a failed request: %v", err)
	}
}

// TestGRPCDrainAnswersAcceptedCalls: SIGTERM while gRPC calls wait for their batch: every
// one is answered, health turns NOT_SERVING, and the gateway exits 0.
func TestGRPCDrainAnswersAcceptedCalls(t *testing.T) {
	photo := sharedPhotos(t, "skimage_coffee.png")[0]
	g := startGateway(t, "server: {drain_delay: 300ms}\nmodels:\n"+defaultModelYAML(t, "{max_batch_size: 64, max_queue_delay: 10s}"))
	c := g.grpcClient(t)
	const n = 12
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := c.Infer(t.Context(), "mobilenet_v3_small", "", &oip.Request{Inputs: []oip.Input{oip.ImageInput("input", true, photo)}})
			errs <- err
		}()
	}
	waitFor(t, func() bool { return g.metric("gateway_queue_length", "") == n })
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		h, err := healthgrpc.NewHealthClient(c.Conn()).Check(t.Context(), &healthgrpc.HealthCheckRequest{})
		return err != nil || h.Status == healthgrpc.HealthCheckResponse_NOT_SERVING
	})
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("a call accepted before SIGTERM: %v", err)
		}
	}
	g.exitsCleanly(t)
}

func asStreamError(err error, se **oipgrpc.StreamError) bool {
	e, ok := err.(*oipgrpc.StreamError)
	*se = e
	return ok
}
