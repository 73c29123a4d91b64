package oipgrpc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/loadtest/oip"
)

// MaxMessageSize is the largest message the client sends or takes by default: 2^31-1 bytes,
// tritonclient.grpc's MAX_GRPC_MESSAGE_SIZE (grpc-go's own default for received messages is
// 4 MiB, which a batch of photos exceeds).
const MaxMessageSize = math.MaxInt32

// ErrInvalid is wrapped by every error about a request this package refuses to encode or a
// response it cannot decode. Errors of the calls themselves are gRPC status errors, as
// grpc-go returns them: status.Code(err) gives their code.
var ErrInvalid = errors.New("oipgrpc: invalid")

// Options configure Dial. The zero value is tritonclient.grpc's defaults, on a plaintext
// (h2c) connection.
type Options struct {
	// Header holds metadata sent with every call (e.g. authorization); names are
	// lower-cased, as gRPC metadata keys are.
	Header map[string]string
	// MaxMessageSize bounds the messages sent and received; 0 means MaxMessageSize.
	MaxMessageSize int
	// Authority sets the :authority pseudo-header (the Host of HTTP); empty means the target.
	Authority string
	// DialOptions are added after the ones above (e.g. transport credentials for TLS, or a
	// custom dialer in tests).
	DialOptions []grpc.DialOption
}

// Client calls one server's GRPCInferenceService over one gRPC connection (HTTP/2, calls
// multiplexed on it). It is safe for concurrent use; Close it when done.
type Client struct {
	conn *grpc.ClientConn
	svc  inference.GRPCInferenceServiceClient
	md   metadata.MD
}

// Dial returns a client of the server at target (host:port, or any target grpc.NewClient
// takes). The connection is made lazily, on the first call: a server that cannot be reached
// shows as an UNAVAILABLE call, not as an error here.
func Dial(target string, o Options) (*Client, error) {
	size := o.MaxMessageSize
	if size <= 0 {
		size = MaxMessageSize
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(size), grpc.MaxCallSendMsgSize(size)),
	}
	if o.Authority != "" {
		opts = append(opts, grpc.WithAuthority(o.Authority))
	}
	opts = append(opts, o.DialOptions...)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("cannot create a gRPC client of %q: %w", target, err)
	}
	c := &Client{conn: conn, svc: inference.NewGRPCInferenceServiceClient(conn)}
	if len(o.Header) > 0 {
		c.md = metadata.MD{}
		for k, v := range o.Header {
			c.md.Append(strings.ToLower(k), v)
		}
	}
	return c, nil
}

// Close closes the connection; calls in flight end with CANCELED.
func (c *Client) Close() error { return c.conn.Close() }

// Service returns the generated stub, for calls this package does not wrap. Options.Header
// is not added to its calls.
func (c *Client) Service() inference.GRPCInferenceServiceClient { return c.svc }

// Conn returns the client's connection.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// ctx adds the client's metadata to ctx.
func (c *Client) ctx(ctx context.Context) context.Context {
	if c.md == nil {
		return ctx
	}
	if old, ok := metadata.FromOutgoingContext(ctx); ok {
		return metadata.NewOutgoingContext(ctx, metadata.Join(old, c.md))
	}
	return metadata.NewOutgoingContext(ctx, c.md)
}

// ServerLive reports ServerLive's answer.
func (c *Client) ServerLive(ctx context.Context) (bool, error) {
	r, err := c.svc.ServerLive(c.ctx(ctx), &inference.ServerLiveRequest{})
	return r.GetLive(), err
}

// ServerReady reports ServerReady's answer.
func (c *Client) ServerReady(ctx context.Context) (bool, error) {
	r, err := c.svc.ServerReady(c.ctx(ctx), &inference.ServerReadyRequest{})
	return r.GetReady(), err
}

// ModelReady reports whether a model (version: "" for the server's choice) is ready.
func (c *Client) ModelReady(ctx context.Context, model, version string) (bool, error) {
	r, err := c.svc.ModelReady(c.ctx(ctx), &inference.ModelReadyRequest{Name: model, Version: version})
	return r.GetReady(), err
}

// ServerMetadata returns the server's name, version and extensions.
func (c *Client) ServerMetadata(ctx context.Context) (*inference.ServerMetadataResponse, error) {
	return c.svc.ServerMetadata(c.ctx(ctx), &inference.ServerMetadataRequest{})
}

// ModelMetadata returns a model's metadata (version: "" for the server's choice).
func (c *Client) ModelMetadata(ctx context.Context, model, version string) (*inference.ModelMetadataResponse, error) {
	return c.svc.ModelMetadata(c.ctx(ctx), &inference.ModelMetadataRequest{Name: model, Version: version})
}

// ModelConfig returns a model's configuration (Triton's extension).
func (c *Client) ModelConfig(ctx context.Context, model, version string) (*inference.ModelConfig, error) {
	r, err := c.svc.ModelConfig(c.ctx(ctx), &inference.ModelConfigRequest{Name: model, Version: version})
	if err != nil {
		return nil, err
	}
	if r.GetConfig() == nil {
		return nil, fmt.Errorf("%w ModelConfig answer: no config", ErrInvalid)
	}
	return r.GetConfig(), nil
}

// ModelStatistics returns the statistics of a model's versions ("" model: every model; ""
// version: every version).
func (c *Client) ModelStatistics(ctx context.Context, model, version string) ([]*inference.ModelStatistics, error) {
	r, err := c.svc.ModelStatistics(c.ctx(ctx), &inference.ModelStatisticsRequest{Name: model, Version: version})
	return r.GetModelStats(), err
}

// RepositoryIndex lists the models of the server's repository (readyOnly: those ready only).
func (c *Client) RepositoryIndex(ctx context.Context, readyOnly bool) ([]*inference.RepositoryIndexResponse_ModelIndex, error) {
	r, err := c.svc.RepositoryIndex(c.ctx(ctx), &inference.RepositoryIndexRequest{Ready: readyOnly})
	return r.GetModels(), err
}

// LoadModel asks the server to load (or reload) a model, with optional parameters (e.g.
// "config": a string_param holding the configuration as JSON).
func (c *Client) LoadModel(ctx context.Context, model string, params map[string]*inference.ModelRepositoryParameter) error {
	_, err := c.svc.RepositoryModelLoad(c.ctx(ctx), &inference.RepositoryModelLoadRequest{ModelName: model, Parameters: params})
	return err
}

// UnloadModel asks the server to unload a model.
func (c *Client) UnloadModel(ctx context.Context, model string) error {
	_, err := c.svc.RepositoryModelUnload(c.ctx(ctx), &inference.RepositoryModelUnloadRequest{ModelName: model})
	return err
}

// Infer runs one inference request on a model (version: "" for the server's choice) and
// decodes the answer. A refused request returns the call's status error.
func (c *Client) Infer(ctx context.Context, model, version string, req *oip.Request) (*oip.Response, error) {
	pr, err := EncodeRequest(model, version, req)
	if err != nil {
		return nil, err
	}
	resp, err := c.InferProto(ctx, pr)
	if err != nil {
		return nil, err
	}
	return DecodeResponse(resp)
}

// InferProto sends a request as it is and returns the answer as it came.
func (c *Client) InferProto(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	return c.svc.ModelInfer(c.ctx(ctx), req)
}

// AsyncInfer encodes the request, then runs it in a goroutine of its own and calls done with
// the outcome, as tritonclient.grpc's async_infer calls its callback; many may be in flight
// on the one connection. An error in encoding is returned at once, and done is not called.
func (c *Client) AsyncInfer(ctx context.Context, model, version string, req *oip.Request, done func(*oip.Response, error)) error {
	pr, err := EncodeRequest(model, version, req)
	if err != nil {
		return err
	}
	go func() {
		resp, err := c.InferProto(ctx, pr)
		if err != nil {
			done(nil, err)
			return
		}
		done(DecodeResponse(resp))
	}()
	return nil
}

// MarshalRequest encodes a request for InferMarshaled, once, ahead of a run.
func MarshalRequest(model, version string, req *oip.Request) ([]byte, error) {
	pr, err := EncodeRequest(model, version, req)
	if err != nil {
		return nil, err
	}
	b, err := proto.Marshal(pr)
	if err != nil {
		return nil, fmt.Errorf("%w request: %v", ErrInvalid, err)
	}
	return b, nil
}

// InferMarshaled sends a marshalled ModelInferRequest (see MarshalRequest) and returns the
// size of the marshalled answer, neither being encoded nor decoded here: the load
// generator's hot path, which must cost the client no more than the HTTP one's bytes sent
// as they are. req is only read, and may be shared by concurrent calls. opts are the call's
// options (grpc.Trailer: the refusal's x-refusal).
func (c *Client) InferMarshaled(ctx context.Context, req []byte, opts ...grpc.CallOption) (int, error) {
	var resp rawMessage
	err := c.conn.Invoke(c.ctx(ctx), inference.GRPCInferenceService_ModelInfer_FullMethodName,
		&rawMessage{b: req}, &resp, append(opts, grpc.ForceCodecV2(rawCodec{}))...)
	return resp.n, err
}

// rawMessage is a message already marshalled (b, sent) or one received (n: its size).
type rawMessage struct {
	b []byte
	n int
}

// rawCodec passes rawMessages through without protobuf encoding. It is named "proto" so that
// calls still carry content-type application/grpc+proto: on the wire they are protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*rawMessage)
	if !ok {
		return nil, fmt.Errorf("oipgrpc: raw codec cannot marshal %T", v)
	}
	// A SliceBuffer is not pooled: grpc's Free of it leaves m.b alone.
	return mem.BufferSlice{mem.SliceBuffer(m.b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("oipgrpc: raw codec cannot unmarshal into %T", v)
	}
	m.n = data.Len()
	return nil
}

func (rawCodec) Name() string { return "proto" }
