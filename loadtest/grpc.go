package loadtest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/imagegate/imagegate/loadtest/oip"
	"github.com/imagegate/imagegate/loadtest/oipgrpc"
)

// grpcMethod names the RPC of a gRPC run in reports.
const grpcMethod = "ModelInfer"

// GRPCTarget returns the host:port of a gRPC run's URL: grpc://host:port or host:port.
func GRPCTarget(rawURL string) (string, error) {
	hostport := rawURL
	if strings.Contains(rawURL, "://") {
		u, err := url.Parse(rawURL)
		if err != nil || u.Scheme != "grpc" && u.Scheme != "grpcs" || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.User != nil {
			return "", fmt.Errorf("%w: gRPC URL %q: want grpc://host:port, grpcs://host:port (TLS) or host:port (no path: the model is -model)", ErrConfig, rawURL)
		}
		hostport = u.Host
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" || port == "" {
		return "", fmt.Errorf("%w: gRPC URL %q: want grpc://host:port or host:port (a port is needed: Triton's is 8001)", ErrConfig, rawURL)
	}
	return hostport, nil
}

func (c *Config) normalizeGRPC() error {
	target, err := GRPCTarget(c.URL)
	if err != nil {
		return err
	}
	if strings.HasPrefix(c.URL, "grpcs://") && c.TLS == nil {
		c.TLS = &tls.Config{}
	}
	c.URL = grpcScheme(c) + target
	if c.Method != "" && c.Method != grpcMethod {
		return fmt.Errorf("%w: a gRPC run calls %s; method %q does not apply", ErrConfig, grpcMethod, c.Method)
	}
	c.Method = grpcMethod
	if !c.KeepAlive {
		return fmt.Errorf("%w: a gRPC run keeps its connections (set KeepAlive; -keepalive=false has no gRPC form)", ErrConfig)
	}
	if len(c.Bodies) == 0 {
		return fmt.Errorf("%w: a gRPC run sends bodies (marshalled inference requests; see PrepareGRPC)", ErrConfig)
	}
	return nil
}

// grpcOptions are the client options of cfg's headers.
func grpcOptions(cfg *Config) oipgrpc.Options {
	var o oipgrpc.Options
	if cfg.TLS != nil {
		o.DialOptions = append(o.DialOptions, grpc.WithTransportCredentials(credentials.NewTLS(cfg.TLS)))
	}
	for _, h := range cfg.Headers {
		switch strings.ToLower(h.Name) {
		case "host":
			o.Authority = h.Value
		case "content-type":
		default:
			if o.Header == nil {
				o.Header = map[string]string{}
			}
			o.Header[h.Name] = h.Value
		}
	}
	return o
}

// PrepareGRPC turns cfg into a gRPC run of the Open Inference Protocol on model (the version
// being the server's choice): cfg.URL is the server's gRPC address (grpc://host:port or
// host:port). It reads the model's metadata over gRPC (with cfg.Headers as metadata; so a
// wrong address or model fails here, before the run), checks that the model takes one BYTES
// input, and replaces each of cfg.Bodies (an image file, or the article's JSON body) with a
// marshalled ModelInferRequest carrying that image as the one element of the BYTES input,
// raw, as tritonclient.grpc sends it (the same images as PrepareV2's). It sets cfg.Protocol,
// cfg.URL and cfg.KeepAlive. It is done once, before the run.
func PrepareGRPC(ctx context.Context, cfg *Config, model string) error {
	if len(cfg.Bodies) == 0 {
		return fmt.Errorf("%w: -protocol grpc needs images (-json-image or -body)", ErrConfig)
	}
	if model == "" {
		return fmt.Errorf("%w: -protocol grpc needs the model to call (-model NAME)", ErrConfig)
	}
	target, err := GRPCTarget(cfg.URL)
	if err != nil {
		return err
	}
	if strings.HasPrefix(cfg.URL, "grpcs://") && cfg.TLS == nil {
		cfg.TLS = &tls.Config{}
	}
	c, err := oipgrpc.Dial(target, grpcOptions(cfg))
	if err != nil {
		return err
	}
	defer c.Close()
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	mctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	md, err := c.ModelMetadata(mctx, model, "")
	if err != nil {
		return fmt.Errorf("cannot read model %s's metadata over gRPC from %s: %w", model, target, err)
	}
	ins := md.GetInputs()
	if len(ins) != 1 || ins[0].GetDatatype() != oip.BYTES {
		var desc []oip.TensorMetadata
		for _, in := range ins {
			desc = append(desc, oip.TensorMetadata{Name: in.GetName(), Datatype: in.GetDatatype(), Shape: in.GetShape()})
		}
		return fmt.Errorf("%w: model %s takes %s; -protocol grpc sends one BYTES input (encoded images)", ErrConfig, model, describeInputs(desc))
	}
	bodies := make([]Body, len(cfg.Bodies))
	for i, b := range cfg.Bodies {
		img, err := ImageOf(b)
		if err != nil {
			return err
		}
		data, err := oipgrpc.MarshalRequest(model, "", &oip.Request{Inputs: []oip.Input{oip.ImageInput(ins[0].GetName(), true, img)}, Parameters: cfg.Params})
		if err != nil {
			return err
		}
		bodies[i] = Body{Name: b.Name + " (gRPC ModelInfer, model " + model + ")", Data: data}
	}
	cfg.Bodies = bodies
	cfg.Protocol = ProtocolGRPC
	cfg.URL = grpcScheme(cfg) + target
	cfg.KeepAlive = true
	return nil
}

// grpcScheme is the scheme of a gRPC run's URL: grpcs:// with TLS.
func grpcScheme(cfg *Config) string {
	if cfg.TLS != nil {
		return "grpcs://"
	}
	return "grpc://"
}

// grpcClients opens cfg.GRPCConns connections (lazily: each connects on its first call).
func grpcClients(cfg *Config) ([]*oipgrpc.Client, error) {
	target, err := GRPCTarget(cfg.URL)
	if err != nil {
		return nil, err
	}
	clients := make([]*oipgrpc.Client, cfg.GRPCConns)
	for i := range clients {
		if clients[i], err = oipgrpc.Dial(target, grpcOptions(cfg)); err != nil {
			for _, c := range clients[:i] {
				c.Close()
			}
			return nil, err
		}
	}
	return clients, nil
}

// grpcWorker sends one marshalled request at a time on a shared connection.
type grpcWorker struct {
	cfg    *Config
	client *oipgrpc.Client
}

func (w *grpcWorker) release() {}

// do sends one request and returns its sample: status holds the gRPC code. As an HTTP
// worker's request, it is bounded by Config.Timeout (the call's deadline, which the server
// sees) and not by Run's context, so requests in flight finish when a run is interrupted.
func (w *grpcWorker) do(start time.Time, seq, intended int64, warm bool) sample {
	b := &w.cfg.Bodies[seq%int64(len(w.cfg.Bodies))]
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
	t0 := time.Now()
	var trailer metadata.MD
	n, err := w.client.InferMarshaled(ctx, b.Data, grpc.Trailer(&trailer))
	t1 := time.Now()
	cancel()
	s := sample{
		intended: intended,
		sent:     int64(t0.Sub(start)),
		done:     int64(t1.Sub(start)),
		warm:     warm,
		bytesOut: int64(len(b.Data)),
		bytesIn:  int64(n),
		status:   int32(status.Code(err)),
		err:      err,
	}
	if err != nil {
		if v := trailer.Get(strings.ToLower(RefusalHeader)); len(v) > 0 && v[0] == RefusalExpired {
			s.expired = true
		}
	}
	if !w.cfg.OpenLoop() {
		s.intended = s.sent
	}
	return s
}

// grpcCodeNames are the canonical names of the gRPC status codes (as the gRPC specification
// and other languages' libraries spell them; Go's codes.Code.String is CamelCase).
var grpcCodeNames = [...]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN",
	codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
	codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED",
	codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED",
	codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE", codes.DataLoss: "DATA_LOSS",
	codes.Unauthenticated: "UNAUTHENTICATED",
}

// grpcCodeName names a gRPC status code, e.g. RESOURCE_EXHAUSTED.
func grpcCodeName(c int32) string {
	if c >= 0 && int(c) < len(grpcCodeNames) {
		return grpcCodeNames[c]
	}
	return fmt.Sprintf("CODE_%d", c)
}
