package oipgrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/imagegate/imagegate/api/inference"
	"github.com/imagegate/imagegate/loadtest/oip"
)

// ErrStreamClosed is returned for requests on a stream that the server ended normally
// (status OK) or that Close ended.
var ErrStreamClosed = errors.New("oipgrpc: the stream is closed")

// StreamError is the failure of one request on a stream: the answer's error_message, the
// stream itself going on (Triton's server answers so, with the request's id).
type StreamError struct {
	ID      string
	Message string
}

func (e *StreamError) Error() string {
	return fmt.Sprintf("oipgrpc: stream request %q failed: %s", e.ID, e.Message)
}

// Stream is one ModelStreamInfer stream (Triton's streaming API, as tritonclient.grpc's
// start_stream and async_stream_infer use it): requests go out on it one after another, and
// each answer comes back on it with its request's id, in whatever order the server answers.
// Infer and InferProto may be called from many goroutines at once, each waiting for its own
// answer; ids must be unique among the requests in flight. Each request takes one answer (the
// gateway's models are not decoupled: no request has several). Close it when done.
type Stream struct {
	stream grpc.BidiStreamingClient[inference.ModelInferRequest, inference.ModelStreamInferResponse]
	cancel context.CancelFunc

	sendMu sync.Mutex // grpc-go allows one sender at a time

	mu      sync.Mutex
	waiting map[string]chan streamAnswer
	err     error // why the stream ended; nil while it runs

	done      chan struct{} // closed when the receiver has ended
	next      atomic.Uint64
	unmatched atomic.Uint64
}

type streamAnswer struct {
	resp *inference.ModelInferResponse
	err  error
}

// OpenStream starts a ModelStreamInfer stream. ctx bounds the whole stream (its deadline is
// the stream's, as tritonclient's stream_timeout); cancelling it ends the stream and every
// request waiting on it.
func (c *Client) OpenStream(ctx context.Context) (*Stream, error) {
	sctx, cancel := context.WithCancel(c.ctx(ctx))
	st, err := c.svc.ModelStreamInfer(sctx)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &Stream{stream: st, cancel: cancel, waiting: map[string]chan streamAnswer{}, done: make(chan struct{})}
	go s.receive()
	return s, nil
}

// receive hands each answer to the request waiting for its id, until the stream ends.
func (s *Stream) receive() {
	defer close(s.done)
	for {
		r, err := s.stream.Recv()
		if err != nil {
			if err == io.EOF {
				err = ErrStreamClosed
			}
			s.mu.Lock()
			s.err = err
			for id, ch := range s.waiting {
				ch <- streamAnswer{err: err}
				delete(s.waiting, id)
			}
			s.mu.Unlock()
			return
		}
		id := r.GetInferResponse().GetId()
		s.mu.Lock()
		ch, ok := s.waiting[id]
		delete(s.waiting, id)
		s.mu.Unlock()
		switch {
		case !ok: // no such request, or its caller stopped waiting
			s.unmatched.Add(1)
		case r.GetErrorMessage() != "":
			ch <- streamAnswer{err: &StreamError{ID: id, Message: r.GetErrorMessage()}}
		default:
			ch <- streamAnswer{resp: r.GetInferResponse()}
		}
	}
}

// Unmatched counts the answers that came for no waiting request (an unknown id, or a request
// whose caller's ctx ended first).
func (s *Stream) Unmatched() uint64 { return s.unmatched.Load() }

// Infer sends a request on the stream and waits for its answer. A request without an ID gets
// one unique on this stream. A request that fails on the stream returns a *StreamError; when
// the stream itself ends, its status error (or ErrStreamClosed). ctx ends the wait only: the
// request, once sent, cannot be withdrawn from the stream.
func (s *Stream) Infer(ctx context.Context, model, version string, req *oip.Request) (*oip.Response, error) {
	pr, err := EncodeRequest(model, version, req)
	if err != nil {
		return nil, err
	}
	if pr.Id == "" {
		pr.Id = "oipgrpc-" + strconv.FormatUint(s.next.Add(1), 10)
	}
	resp, err := s.InferProto(ctx, pr)
	if err != nil {
		return nil, err
	}
	return DecodeResponse(resp)
}

// InferProto sends a request as it is (its Id set and unique among the requests in flight on
// the stream) and waits for the answer with that id.
func (s *Stream) InferProto(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	id := req.GetId()
	if id == "" {
		return nil, fmt.Errorf("%w stream request: no id to match its answer by", ErrInvalid)
	}
	ch := make(chan streamAnswer, 1)
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return nil, s.err
	}
	if _, dup := s.waiting[id]; dup {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w stream request: id %q is already in flight", ErrInvalid, id)
	}
	s.waiting[id] = ch
	s.mu.Unlock()

	s.sendMu.Lock()
	err := s.stream.Send(req)
	s.sendMu.Unlock()
	if err != nil {
		s.forget(id, ch)
		if err == io.EOF { // the stream ended; Recv has its status
			<-s.done
			return nil, s.err
		}
		return nil, err
	}
	select {
	case a := <-ch:
		return a.resp, a.err
	case <-ctx.Done():
		s.forget(id, ch)
		return nil, ctx.Err()
	}
}

// forget stops waiting for id's answer (if ch still waits for it).
func (s *Stream) forget(id string, ch chan streamAnswer) {
	s.mu.Lock()
	if s.waiting[id] == ch {
		delete(s.waiting, id)
	}
	s.mu.Unlock()
}

// Close half-closes the stream (no more requests), waits until the server has answered every
// request sent and ended the stream, and returns the stream's final error: nil when it ended
// with status OK. Cancel OpenStream's ctx not to wait.
func (s *Stream) Close() error {
	s.sendMu.Lock()
	err := s.stream.CloseSend()
	s.sendMu.Unlock()
	<-s.done
	s.cancel()
	if err != nil {
		return err
	}
	if errors.Is(s.err, ErrStreamClosed) {
		return nil
	}
	return s.err
}
