package grpcapi

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/imagegate/imagegate/api/inference"
)

// streamInflight bounds the requests of one ModelStreamInfer stream in the pipeline at once;
// the stream reads no more until one is answered.
const streamInflight = 256

// Stream serves a ModelStreamInfer stream: it answers each request of the stream with infer,
// with its id, as its answer is ready (not in order); a failed request is answered with
// error_message, and the stream goes on. The stream ends when the client closes its side
// (once every request is answered), or when stop is closed (the server drains). A request
// read but not handed to infer (the stream ended first) is handed to drop.
func Stream(st inference.GRPCInferenceService_ModelStreamInferServer, stop <-chan struct{},
	infer func(context.Context, *inference.ModelInferRequest) (*inference.ModelInferResponse, error),
	drop func(*inference.ModelInferRequest)) error {
	ctx := st.Context()
	reqs := make(chan *inference.ModelInferRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				drop(req)
				return
			}
		}
	}()
	var (
		sendMu  sync.Mutex
		sendErr error
		wg      sync.WaitGroup
		sem     = make(chan struct{}, streamInflight)
		err     error
	)
	answer := func(req *inference.ModelInferRequest) {
		defer func() { <-sem; wg.Done() }()
		resp, err := infer(ctx, req)
		if err != nil && ctx.Err() != nil {
			return // the stream ended: nobody to answer
		}
		out := &inference.ModelStreamInferResponse{InferResponse: resp}
		if err != nil {
			out.ErrorMessage = status.Convert(err).Message()
			out.InferResponse = &inference.ModelInferResponse{ModelName: req.GetModelName(), ModelVersion: req.GetModelVersion(), Id: req.GetId()}
		}
		if req.GetParameters()["triton_enable_empty_final_response"].GetBoolParam() {
			// Triton's streaming clients that ask for it wait for a response marked final; a
			// request here has one response, so it is the final one.
			if out.InferResponse.Parameters == nil {
				out.InferResponse.Parameters = map[string]*inference.InferParameter{}
			}
			out.InferResponse.Parameters["triton_final_response"] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}
		}
		sendMu.Lock()
		if sendErr == nil {
			sendErr = st.Send(out)
		}
		sendMu.Unlock()
	}
loop:
	for {
		select {
		case req := <-reqs:
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				drop(req)
				break loop
			}
			wg.Add(1)
			go answer(req)
		case e := <-recvErr:
			if !errors.Is(e, io.EOF) {
				err = e
			}
			break loop
		case <-stop:
			err = status.Error(codes.Unavailable, "gateway: draining: the server is shutting down; the stream's requests it read are answered, open a new stream to another server")
			// A request read before the stop and not yet handed over is answered too.
			select {
			case req := <-reqs:
				select {
				case sem <- struct{}{}:
					wg.Add(1)
					go answer(req)
				case <-ctx.Done():
					drop(req)
				}
			default:
			}
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	wg.Wait()
	return err
}
