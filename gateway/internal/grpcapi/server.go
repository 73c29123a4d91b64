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
	// minWindow is HTTP/2's initial flow-control window, a call's by default
	// (Limits.CallWindow); a connection's is connWindows calls' worth, at least
	// minConnWindow, so that the calls in flight on one connection do not wait for each
	// other's window updates.
	minWindow     = 64 << 10
	connWindows   = 64
	minConnWindow = 4 << 20
	// readBuffer is the size of a connection's reads: a photo's message in few of them.
	readBuffer = 256 << 10
)

// PingTimeout is how long the server waits for a ping's answer (or, as TCP_USER_TIMEOUT, for
// written data to be acknowledged) before it drops the connection.
const PingTimeout = 20 * time.Second

// Limits are a gRPC server's bounds: messages of up to MaxBody bytes of tensor data (and
// their framing); CallWindow, a call's flow-control window (0: minWindow); connections closed
// after Idle without calls (GOAWAY first), refused when their handshake takes longer than
// Handshake.
type Limits struct {
	MaxBody, CallWindow int64
	Idle, Handshake     time.Duration
}

// ServerOptions are the gRPC server's options: its limits, tap run on each call before its
// message is read, the codec and its buffer pool (grpcio.NewCodec). A call's window is small
// by default: a call refused at the door costs at most a window of its upload, and an admitted
// message larger than the window waits a round trip per window for the server's updates.
func ServerOptions(l Limits, tap tap.ServerInHandle, codec *grpcio.Codec, pool *grpcio.BufferPool) []grpc.ServerOption {
	window := min(max(l.CallWindow, minWindow), 1<<30)
	conn := min(max(connWindows*window, minConnWindow), 1<<30)
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(min(l.MaxBody+framing, 1<<31-1))),
		grpc.MaxConcurrentStreams(maxStreams),
		// A client may ping every 10 s at most, with or without calls in flight (Triton's
		// client pings while idle when its keepalive is set); more often is a GOAWAY.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// A connection idle for server.idle_timeout is closed (GOAWAY first), as HTTP's.
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: l.Idle, Time: time.Minute, Timeout: PingTimeout}), // pings find dead peers
		grpc.ConnectionTimeout(l.Handshake),
		grpc.SharedWriteBuffer(true),
		grpc.InTapHandle(tap),
		// Set, the windows are fixed (grpc-go's estimate of the bandwidth-delay product, which
		// grows them, is off).
		grpc.InitialWindowSize(int32(window)),
		grpc.InitialConnWindowSize(int32(conn)),
		grpc.ReadBufferSize(readBuffer),
		// Calls run on goroutines kept for them (their stacks already grown), not one new
		// goroutine each; when all are busy grpc-go starts one as before.
		grpc.NumStreamWorkers(uint32(4 * runtime.GOMAXPROCS(0))),
		experimental.BufferPool(pool),
		grpc.ForceServerCodecV2(codec),
		grpc.StatsHandler(codec.Releaser()),
	}
}
