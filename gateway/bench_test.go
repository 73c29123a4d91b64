package gateway

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// BenchmarkPredictRequest is one /predict request through the whole pipeline and back over an
// in-memory connection, with a fake runner: allocs/op are what a request costs the gateway
// (plus the client's, which do not change), the figure that tells a new allocation on the hot
// path. The +access and +trace forms add the access log (JSON, discarded) and tracing (every
// request sampled; the spans are dropped by a processor that exports nothing).
func BenchmarkPredictRequest(b *testing.B) {
	img := solidPNG(b, 16, 16, 9)
	access := func(o *Options) { o.AccessLog = slog.New(slog.NewJSONHandler(io.Discard, nil)); o.AccessSample = 1 }
	traced := func(o *Options) {
		o.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(tracetest.NewNoopExporter())))
	}
	for _, c := range []struct {
		name, ct string
		body     []byte
		opts     []func(*Options)
	}{
		{"png", "image/png", img, nil},
		{"json", "application/json", []byte(`{"image":"` + base64.StdEncoding.EncodeToString(img) + `"}`), nil},
		{"png+access", "image/png", img, []func(*Options){access}},
		{"png+trace", "image/png", img, []func(*Options){traced}},
	} {
		b.Run(c.name, func(b *testing.B) {
			o := testOptions()
			for _, f := range c.opts {
				f(&o)
			}
			s, err := New(o, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.AddModel(modelOpts("m", RunnersOf[float32]{newFake[float32](3*side*side, 3, 4)})); err != nil {
				b.Fatal(err)
			}
			ln := fasthttputil.NewInmemoryListener()
			served := make(chan error, 1)
			go func() { served <- s.Serve(ln) }()
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				s.Shutdown(ctx)
				<-served
			}()
			client := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI("http://gw/predict/")
			req.Header.SetMethod("POST")
			req.Header.SetContentType(c.ct)
			req.SetBody(c.body)
			b.ReportAllocs()
			for b.Loop() {
				if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
					b.Fatalf("%v: %d %s", err, resp.StatusCode(), resp.Body())
				}
			}
		})
	}
}
