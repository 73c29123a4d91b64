package gateway

import (
	"context"
	"encoding/base64"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// BenchmarkPredictRequest is one /predict request through the whole pipeline and back over an
// in-memory connection, with a fake runner: allocs/op are what a request costs the gateway
// (plus the client's, which do not change), the figure that tells a new allocation on the hot
// path.
func BenchmarkPredictRequest(b *testing.B) {
	img := solidPNG(b, 16, 16, 9)
	for _, c := range []struct {
		name, ct string
		body     []byte
	}{
		{"png", "image/png", img},
		{"json", "application/json", []byte(`{"image":"` + base64.StdEncoding.EncodeToString(img) + `"}`)},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, err := New(testOptions(), nil)
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
