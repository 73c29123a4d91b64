package grpcio

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/imagegate/imagegate/api/inference"
)

// Codec is the gRPC server's codec: protobuf, as grpc-go's own, except that a
// ModelInferRequest's raw_input_contents (the images) are not copied out of the message:
// protobuf-go copies every bytes field, so the message is assembled once into a buffer of its
// own and the entries of raw_input_contents are slices of it. The buffer comes from the pool
// and goes back to it on Release, once the request is answered (a fresh buffer each message
// was cleared memory, garbage and page faults for every photo received).
type Codec struct {
	proto encoding.CodecV2
	pool  *BufferPool
	held  sync.Map // *inference.ModelInferRequest -> *[]byte its raw_input_contents alias
}

// NewCodec returns the codec (grpc.ForceServerCodecV2), with the messages' buffers from pool.
func NewCodec(pool *BufferPool) *Codec {
	return &Codec{proto: encoding.GetCodecV2("proto"), pool: pool}
}

func (*Codec) Name() string { return "proto" }

func (c *Codec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*inference.ModelInferRequest)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	buf := c.pool.Get(data.Len())
	data.CopyTo(*buf)
	if err := UnmarshalInfer(*buf, req); err != nil || len(req.RawInputContents) == 0 {
		c.pool.Put(buf) // nothing aliases it: protobuf-go copied what it decoded
		return err
	}
	if old, loaded := c.held.Swap(req, buf); loaded {
		c.pool.Put(old.(*[]byte)) // a second message decoded into the same request replaced the first
	}
	return nil
}

// Release returns the buffer that req's raw_input_contents alias to the pool: nothing may
// read them after. A request that aliases none is let be.
func (c *Codec) Release(req *inference.ModelInferRequest) {
	if b, ok := c.held.LoadAndDelete(req); ok {
		c.pool.Put(b.(*[]byte))
	}
}

// Releaser is a stats handler (grpc.StatsHandler) that releases a unary ModelInfer call's
// buffer when the call ends, whatever ended it: grpc-go decodes the message and then reads on
// for the end of the client's stream, and when that read fails (a second message, a client
// that leaves or stalls) the call fails without reaching the handler that would release it.
func (c *Codec) Releaser() stats.Handler { return releaser{c} }

type releaser struct{ c *Codec }

type releaseKey struct{}

// releaseSlot holds the request a call decoded, for its end.
type releaseSlot struct {
	req atomic.Pointer[inference.ModelInferRequest]
}

func (releaser) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if info.FullMethodName != inference.GRPCInferenceService_ModelInfer_FullMethodName {
		return ctx // a stream's requests are released one by one as they are answered or dropped
	}
	return context.WithValue(ctx, releaseKey{}, new(releaseSlot))
}

func (r releaser) HandleRPC(ctx context.Context, st stats.RPCStats) {
	slot, ok := ctx.Value(releaseKey{}).(*releaseSlot)
	if !ok {
		return
	}
	switch st := st.(type) {
	case *stats.InPayload:
		if req, ok := st.Payload.(*inference.ModelInferRequest); ok {
			slot.req.Store(req)
		}
	case *stats.End:
		if req := slot.req.Load(); req != nil {
			r.c.Release(req)
		}
	}
}

func (releaser) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (releaser) HandleConn(context.Context, stats.ConnStats)                       {}

// Held counts the buffers not released yet (tests).
func (c *Codec) Held() int {
	n := 0
	c.held.Range(func(any, any) bool { n++; return true })
	return n
}

// rawInputContents is raw_input_contents' field number in ModelInferRequest.
const rawInputContents = 7

// UnmarshalInfer decodes b into req with raw_input_contents aliasing b. The other fields
// (names, shapes, parameters: small) are decoded by protobuf-go from a copy of b without
// raw_input_contents; a message the scan cannot split is left to protobuf-go whole (which
// then reports what is wrong with it).
func UnmarshalInfer(b []byte, req *inference.ModelInferRequest) error {
	var raws [][]byte
	var rest []byte
	for p, start := b, 0; len(p) > 0; {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return proto.Unmarshal(b, req)
		}
		m := protowire.ConsumeFieldValue(num, typ, p[n:])
		if m < 0 {
			return proto.Unmarshal(b, req)
		}
		if num == rawInputContents && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(p[n:])
			raws = append(raws, v[:len(v):len(v)])
			at := len(b) - len(p)
			rest = append(rest, b[start:at]...)
			start = at + n + m
		}
		p = p[n+m:]
		if len(p) == 0 {
			rest = append(rest, b[start:]...)
		}
	}
	if raws == nil {
		return proto.Unmarshal(b, req)
	}
	if err := proto.Unmarshal(rest, req); err != nil {
		return err
	}
	req.RawInputContents = raws
	return nil
}
