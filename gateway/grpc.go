package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/gateway/internal/admit"
	"github.com/imagegate/imagegate/gateway/internal/answer"
	"github.com/imagegate/imagegate/gateway/internal/grpcapi"
	"github.com/imagegate/imagegate/gateway/internal/wire"
	"github.com/imagegate/imagegate/postprocess"
)

// The Open Inference Protocol over gRPC: ModelInfer and ModelStreamInfer run through the same
// pipeline as HTTP's requests (Server.infer: admission, the memory budget, the decode gate,
// the batcher, deadlines, metrics), so that a gRPC request and an HTTP one share batches.
// grpcTransport is the pipeline's view of the call; grpcAPI is the front end (the request
// message in, the response message out). The other RPCs, the server's lifecycle and the
// health service are in grpc_service.go.

// grpcTransport is a gRPC call's transport: its deadline is the RPC's (or the model's default,
// or the request's "timeout" parameter, whichever is first), its body the message grpc-go
// already decoded (its size taken from the memory budget), its client's leaving the call's
// context, its failure a status code.
type grpcTransport struct {
	ctx    context.Context // the call's (a stream's, for ModelStreamInfer)
	req    *inference.ModelInferRequest
	res    *grpcResult // where the answer goes (outside the pooled request)
	stream bool        // one request of a ModelStreamInfer stream: no header metadata
	size   int64       // the request message's size
	out    int64       // the response's raw output bytes
}

// grpcResult is a call's answer: its response, or its status error.
type grpcResult struct {
	resp *inference.ModelInferResponse
	err  error
}

// grpcInfer runs one ModelInfer request through the pipeline. md is the call's metadata: its
// x-request-id (unary calls only: a stream's requests are told apart by their ids),
// traceparent and tracestate; incoming, the call's place in the decode line since the tap
// (zero: none), which the request takes over.
func (s *Server) grpcInfer(ctx context.Context, req *inference.ModelInferRequest, md metadata.MD, stream bool, incoming admit.Ticket) (*inference.ModelInferResponse, error) {
	if k := grpcKey(ctx); k != nil { // the call's key (security.go): its model, its limits, its count
		return s.grpcKeyInfer(ctx, k, req, md, stream, incoming)
	}
	return s.grpcInferAs(ctx, req, md, stream, incoming, "")
}

// grpcInferAs runs grpcInfer's request, with key the name of its API key ("": none).
func (s *Server) grpcInferAs(ctx context.Context, req *inference.ModelInferRequest, md metadata.MD, stream bool, incoming admit.Ticket, key string) (*inference.ModelInferResponse, error) {
	name, tensorOnly := strings.CutSuffix(req.GetModelName(), tensorSuffix)
	m, err := s.lookup(name, req.GetModelVersion())
	if err != nil {
		s.adm.Gate.Arrived(incoming)
		status, reason := s.classify(err)
		s.met.unknown.Observe(status, reason, 0)
		if !stream && retryable(reason) {
			grpc.SetTrailer(ctx, metadata.Pairs("retry-after", s.retryAfter))
		}
		return nil, grpcapi.Error(status, err.Error())
	}
	defer m.done()
	r := s.newRequest(m, grpcAPI{tensorOnly: tensorOnly})
	r.incoming = incoming // in line since the tap, until the request reaches the decode gate
	var res grpcResult
	r.grpc = grpcTransport{ctx: ctx, req: req, res: &res, stream: stream}
	r.t = &r.grpc
	r.meta.key = key
	if md != nil {
		if !stream {
			r.takeRequestID(mdValue(md, "x-request-id"))
		}
		r.takeTraceContext(mdValue(md, "traceparent"), mdValue(md, "tracestate"))
	}
	s.infer(r)
	return res.resp, res.err
}

// mdValue is the first value of a metadata key (nil: none).
func mdValue(md metadata.MD, key string) []byte {
	if v := md[key]; len(v) > 0 {
		return []byte(v[0])
	}
	return nil
}

func (t *grpcTransport) options(r *request) error {
	m := r.m
	timeout := m.defaultTimeout
	for k, p := range t.req.GetParameters() {
		switch k {
		case "timeout": // Triton's: microseconds; it only shortens the model's default
			us, ok := grpcapi.ParamInt(p)
			if !ok || us <= 0 {
				return wire.Malformed("parameter timeout must be a positive number of microseconds")
			}
			if us < timeout.Microseconds() {
				timeout = time.Duration(us) * time.Microsecond
			}
		case "priority":
			pr, ok := grpcapi.ParamInt(p)
			if !ok || pr < 0 || pr > math.MaxInt32 {
				return wire.Malformed("parameter priority must be a non-negative integer")
			}
			r.priority = int(pr)
		}
	}
	r.deadline = r.start.Add(timeout)
	if dl, ok := t.ctx.Deadline(); ok && dl.Before(r.deadline) {
		r.deadline = dl // the call's own deadline (grpc-timeout)
	}
	return nil
}

// declaredBytes is the message's size: grpc-go received it whole (within
// server.max_body_bytes and its framing), so its size is known before the pipeline runs.
func (t *grpcTransport) declaredBytes(*request) int64 {
	if t.size == 0 {
		t.size = int64(proto.Size(t.req))
	}
	return t.size
}

// readBody takes the message's bytes from the memory budget: grpc-go holds them (the images
// are the raw_input_contents the front end reads in place, without a copy).
func (t *grpcTransport) readBody(r *request) error {
	if err := r.reserve(t.declaredBytes(r)); err != nil {
		return err
	}
	r.bodyDone = true
	return nil
}

// watchGone: a call cancelled by its client (or its connection's end) cancels its context;
// its deadline passing is the request's own deadline, not a client that left.
func (t *grpcTransport) watchGone(_ *request, gone func()) (release func()) {
	ctx := t.ctx
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.Canceled) {
			gone()
		}
	})
	return func() { stop() }
}

func (t *grpcTransport) fail(r *request, status int, msg string, retry bool) {
	switch {
	case t.stream:
	case retry && r.meta.refusal != "":
		grpc.SetTrailer(t.ctx, metadata.Pairs("retry-after", r.s.retryAfter, "x-refusal", r.meta.refusal)) // HTTP's X-Refusal
	case retry:
		grpc.SetTrailer(t.ctx, metadata.Pairs("retry-after", r.s.retryAfter))
	}
	t.res.err = grpcapi.Error(status, msg)
}

func (t *grpcTransport) abandon(*request) {
	t.res.err = status.Error(codes.Canceled, "the call was cancelled")
}

func (t *grpcTransport) discard(*request, error) {}

// annotate sends the request's ID and stage times as the call's header metadata
// (x-request-id, server-timing); a stream's requests carry their ids instead.
func (t *grpcTransport) annotate(r *request) {
	if t.stream {
		return
	}
	var buf [160]byte
	grpc.SetHeader(t.ctx, metadata.Pairs("x-request-id", string(r.requestID()), "server-timing", string(r.appendServerTiming(buf[:0]))))
}

func (t *grpcTransport) logAttrs(_ *request, attrs []slog.Attr) []slog.Attr {
	client := ""
	if p, ok := peer.FromContext(t.ctx); ok && p.Addr != nil {
		client = p.Addr.String()
	}
	method, _ := grpc.Method(t.ctx)
	return append(attrs, slog.String("client", client), slog.String("method", "gRPC"), slog.String("path", method))
}

func (t *grpcTransport) bytes(*request) (in, out int64) { return t.size, t.out }

// grpcAPI is the Open Inference Protocol's front end over gRPC: the request message is put in
// the shape of HTTP's parsed header (r.v2) and checked and filled by the same code
// (parseInput); raw_input_contents is read in place.
type grpcAPI struct{ tensorOnly bool }

func (grpcAPI) decodes() bool { return false }

// maxGRPCOutputs bounds the outputs a request may list (as HTTP's JSON header does).
const maxGRPCOutputs = 8

func (a grpcAPI) parse(r *request) error {
	err := a.parseMessage(r)
	r.v2.binaryBody = nil
	r.dropImage()
	return err
}

func (a grpcAPI) parseMessage(r *request) error {
	req, v := r.grpc.req, &r.v2
	if id := req.GetId(); id != "" {
		v.HasID = true
		r.adoptRequestID([]byte(id))
	}
	ins := req.GetInputs()
	v.Inputs = len(ins)
	if len(ins) != 1 {
		return wire.Malformed("the model takes one input (%q), the request has %d", r.m.inputName, len(ins))
	}
	in, raw := ins[0], req.GetRawInputContents()
	v.In.Name = append(v.In.Name[:0], in.GetName()...)
	v.In.Datatype = append(v.In.Datatype[:0], in.GetDatatype()...)
	shape := in.GetShape()
	if len(shape) > wire.MaxDims {
		return wire.Malformed("shape has more than %d dimensions", wire.MaxDims)
	}
	for i, d := range shape {
		if d < 0 {
			return wire.Malformed("shape dimensions must not be negative, got %d", d)
		}
		v.In.Shape[i] = d
	}
	v.In.NDim = len(shape)
	var typed *typedData
	switch c := in.GetContents(); {
	case len(raw) > 1:
		return wire.Malformed("raw_input_contents has %d entries for one input", len(raw))
	case len(raw) == 1:
		if c != nil {
			return wire.Malformed("input %q has both contents and raw_input_contents", r.m.inputName)
		}
		v.In.HasBinary, v.In.BinarySize = true, int64(len(raw[0]))
		v.binaryBody = raw[0]
	case c != nil:
		if len(c.BoolContents)+len(c.IntContents)+len(c.Int64Contents)+len(c.Uint64Contents)+len(c.Fp64Contents) > 0 {
			return wire.Malformed("input %q: contents of a datatype the model does not take (it takes BYTES in bytes_contents, %s in %s)",
				r.m.inputName, r.m.datatype, map[bool]string{true: "fp32_contents", false: "uint_contents"}[r.m.datatype == "FP32"])
		}
		typed = &typedData{elems: c.BytesContents, fp32: c.Fp32Contents, uints: c.UintContents}
	}
	outs := req.GetOutputs()
	if len(outs) > maxGRPCOutputs {
		return wire.Malformed("more than %d outputs requested", maxGRPCOutputs)
	}
	for _, o := range outs {
		out := wire.Output{Name: []byte(o.GetName()), Binary: -1}
		if p, ok := o.GetParameters()["classification"]; ok {
			k, ok := grpcapi.ParamInt(p)
			if !ok || k < 1 || k > math.MaxInt32 {
				return wire.Malformed("classification must be a positive count")
			}
			out.Classification = int(k)
		}
		v.Outs = append(v.Outs, out)
	}
	for k, p := range req.GetParameters() {
		switch k {
		case "detections", postprocess.ParamScoreThreshold, postprocess.ParamIOUThreshold, postprocess.ParamMaxDetections:
			if txt, ok := grpcapi.ParamText(p); ok {
				v.AddParam([]byte(k), []byte(txt))
			}
		}
	}
	return r.parseInput(a.tensorOnly, typed)
}

// write answers with raw_output_contents, as Triton does: the scores as FP32 [n, classes], or
// with the classification parameter, BYTES [n, k] of "<score>:<index>:<label>" (each a 4-byte
// length and its bytes).
func (a grpcAPI) write(r *request) error {
	v, m := &r.v2, r.m
	n := r.samples.len()
	outs := v.Outs
	if len(outs) == 0 {
		outs = append(outs, wire.Output{Binary: -1})
	}
	name := m.name
	if a.tensorOnly {
		name += tensorSuffix
	}
	resp := &inference.ModelInferResponse{ModelName: name, ModelVersion: m.version, Id: r.grpc.req.GetId()}
	if m.task.task != TaskClassify {
		writeTensors(r, resp)
		r.grpc.res.resp = resp
		return nil
	}
	for _, o := range outs {
		t := &inference.ModelInferResponse_InferOutputTensor{Name: m.outputName}
		var raw []byte
		if k := o.Classification; k > 0 {
			t.Datatype, t.Shape = "BYTES", []int64{int64(n), int64(k)}
			for i := range n {
				sc := r.samples.output(i, scoresOutput)
				for _, idx := range topIndices(sc, k) {
					raw = wire.AppendBytesElement(raw, []byte(classString(sc[idx], idx, m.labels[idx])))
				}
			}
		} else {
			t.Datatype, t.Shape = "FP32", []int64{int64(n), int64(m.classes)}
			raw = make([]byte, 0, n*m.classes*4)
			for i := range n {
				for _, f := range r.samples.output(i, scoresOutput) {
					raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(f))
				}
			}
		}
		r.grpc.out += int64(len(raw))
		resp.Outputs = append(resp.Outputs, t)
		resp.RawOutputContents = append(resp.RawOutputContents, raw)
	}
	r.grpc.res.resp = resp
	return nil
}

// writeTensors puts the outputs of a model that is no classifier (task.go's tensors) in resp,
// those the request names or else every one, as raw_output_contents.
func writeTensors(r *request, resp *inference.ModelInferResponse) {
	ts := r.answerTensors()
	add := func(t *answer.Tensor) {
		raw := answer.AppendBinary(nil, t)
		r.grpc.out += int64(len(raw))
		resp.Outputs = append(resp.Outputs, &inference.ModelInferResponse_InferOutputTensor{Name: t.Name, Datatype: t.Datatype, Shape: slices.Clone(t.Shape)})
		resp.RawOutputContents = append(resp.RawOutputContents, raw)
	}
	if len(r.v2.Outs) == 0 {
		for i := range ts {
			add(&ts[i])
		}
		return
	}
	for _, o := range r.v2.Outs {
		add(&ts[slices.IndexFunc(ts, func(t answer.Tensor) bool { return t.Name == string(o.Name) })]) // checked at parse
	}
}
