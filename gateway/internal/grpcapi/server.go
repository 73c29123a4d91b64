package grpcapi

import (
	"runtime"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/tap"

	"github.com/imagegate/imagegate/gateway/internal/grpcio"
)

const (
	// maxStreams bounds the calls in flight on one connection (HTTP/2's
	// SETTINGS_MAX_CONCURRENT_STREAMS); the pipeline's admission bounds them over all.
	maxStreams = 1024
	// framing is what a message may hold beyond server.max_body_bytes of tensor data: its
	// names, shape, parameters and protobuf framing.
	framing = 64 << 10
	// window is a call's HTTP/2 flow-control window (a connection's is 4 of them): what a
	// client may send before the server reads it.
	window = 1 << 20
)

// PingTimeout is how long the server waits for a ping's answer (or, as TCP_USER_TIMEOUT, for
// written data to be acknowledged) before it drops the connection.
const PingTimeout = 20 * time.Second

// ServerOptions are the gRPC server's options: messages of up to maxBody bytes of tensor data
// (and their framing), connections closed after idle without calls (GOAWAY first) and refused
// when their handshake takes longer than handshake, tap run on each call before its message
// is read, the codec and its buffer pool (grpcio.NewCodec).
func ServerOptions(maxBody int64, idle, handshake time.Duration, tap tap.ServerInHandle, codec *grpcio.Codec, pool *grpcio.BufferPool) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(min(maxBody+framing, 1<<31-1))),
		grpc.MaxConcurrentStreams(maxStreams),
		// A client may ping every 10 s at most, with or without calls in flight (Triton's
		// client pings while idle when its keepalive is set); more often is a GOAWAY.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// A connection idle for server.idle_timeout is closed (GOAWAY first), as HTTP's.
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: idle, Time: time.Minute, Timeout: PingTimeout}), // pings find dead peers
		grpc.ConnectionTimeout(handshake),
		grpc.SharedWriteBuffer(true),
		grpc.InTapHandle(tap),
		// A photo's message (hundreds of KiB) arrives without waiting for window updates,
		// and in few reads.
		grpc.InitialWindowSize(window),
		grpc.InitialConnWindowSize(4 * window),
		grpc.ReadBufferSize(window / 4),
		// Calls run on goroutines kept for them (their stacks already grown), not one new
		// goroutine each; when all are busy grpc-go starts one as before.
		grpc.NumStreamWorkers(uint32(4 * runtime.GOMAXPROCS(0))),
		experimental.BufferPool(pool),
		grpc.ForceServerCodecV2(codec),
		grpc.StatsHandler(codec.Releaser()),
	}
}
