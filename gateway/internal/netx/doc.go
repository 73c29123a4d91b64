// Package netx is the gateway's connection layer, below HTTP: what the server does with
// sockets that the standard library and fasthttp do not.
//
//   - Tracker bounds the open connections (closing the longest-idle one at the limit, serving
//     a bounded number of overflow connections health checks only), wraps the listener so
//     that Close serves the connections waiting in the kernel's backlog (accept4 on the
//     socket itself), and closes connections by lingering when the client may still be
//     sending (so that it reads its answer instead of a reset).
//   - Conn is one connection: it checks the opening bytes (a TLS handshake or a bare-LF
//     request line get an answer at once), notes whether a request line has ended, and drops
//     the bytes read into the discard region in the kernel (recv with MSG_TRUNC).
//   - TLS (Tracker.ListenTLS, and ListenTLS for a listener without a tracker): a Conn reads
//     and writes through crypto/tls, the handshake made on the first read under the server's
//     read deadline; everything above holds for it but the kernel discards (its bytes must be
//     decrypted). A client that opens with plain text gets ErrHTTPOnTLSPort or ErrNotTLS at
//     once, and its answer goes out in plain text.
//   - Tracker.Drain reads and drops what is left of a request body that was not used.
//   - Watcher notices clients that close their connection while their request waits (a
//     private epoll set, EPOLLRDHUP).
//   - PendingInput tells whether bytes wait unread in a socket (SIOCINQ).
//
// The Linux mechanics have portable fallbacks that do nothing (no watch, no kernel discard,
// no look into the socket). Everything here belongs to the Tracker or Watcher that a Server
// creates and closes, but the discard region: address space that nothing reads, mapped once
// for the process and shared by every drain. It imports nothing of this module nor any HTTP
// library.
package netx
