package loadtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// expectWorker sends HTTP/1.1 requests with "Expect: 100-continue" over a connection of its
// own: it writes the header, waits for the server's "100 Continue" before the body, and reads
// a final answer given instead (a refusal) without sending the body at all (RFC 9110 10.1.1).
// The server may then close the connection: the worker opens a new one for its next request.
type expectWorker struct {
	cfg  *Config
	addr string
	head []byte // request line and the fixed headers, without Content-Length
	conn net.Conn
	br   *bufio.Reader
	buf  []byte
}

// expectWait is how long a worker waits for "100 Continue" before sending the body anyway
// (curl waits 1 s; a server that ignores Expect answers only after the body).
const expectWait = time.Second

func newExpectWorker(cfg *Config, u *url.URL) *expectWorker {
	addr := u.Host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(strings.Trim(addr, "[]"), "80")
	}
	var b bytes.Buffer
	path := u.RequestURI()
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", cfg.Method, path)
	host := u.Host
	for _, h := range cfg.Headers {
		if strings.EqualFold(h.Name, "Host") {
			host = h.Value
		}
	}
	fmt.Fprintf(&b, "Host: %s\r\nUser-Agent: imagegate-loadtest\r\nExpect: 100-continue\r\n", host)
	for _, h := range cfg.Headers {
		if !strings.EqualFold(h.Name, "Host") {
			fmt.Fprintf(&b, "%s: %s\r\n", h.Name, h.Value)
		}
	}
	if !cfg.KeepAlive {
		b.WriteString("Connection: close\r\n")
	}
	return &expectWorker{cfg: cfg, addr: addr, head: b.Bytes()}
}

func (w *expectWorker) release() { w.close() }

func (w *expectWorker) close() {
	if w.conn != nil {
		w.conn.Close()
		w.conn, w.br = nil, nil
	}
}

func (w *expectWorker) do(start time.Time, seq, intended int64, warm bool) sample {
	var body []byte
	var extra []Header
	if n := len(w.cfg.Bodies); n > 0 {
		b := &w.cfg.Bodies[seq%int64(n)]
		body, extra = b.Data, b.Headers
	}
	t0 := time.Now()
	status, in, sentBody, expired, err := w.roundTrip(body, extra, t0.Add(w.cfg.Timeout))
	t1 := time.Now()
	s := sample{sent: int64(t0.Sub(start)), done: int64(t1.Sub(start)), warm: warm, intended: intended}
	if !w.cfg.OpenLoop() {
		s.intended = s.sent
	}
	if sentBody {
		s.bytesOut = int64(len(body))
	}
	if err != nil {
		w.close()
		s.kind, s.err = classify(err), err
		return s
	}
	s.status, s.bytesIn, s.expired = int32(status), in, expired
	return s
}

// roundTrip sends one request and reads its final answer; it reports whether the body was sent
// and whether the answer is a refusal given after a wait (RefusalHeader).
func (w *expectWorker) roundTrip(body []byte, extra []Header, deadline time.Time) (status int, in int64, sentBody, expired bool, err error) {
	if w.conn == nil {
		d := net.Dialer{Deadline: deadline}
		if w.conn, err = d.Dial("tcp", w.addr); err != nil {
			w.conn = nil
			return 0, 0, false, false, err
		}
		w.br = bufio.NewReaderSize(w.conn, 16<<10)
	}
	w.conn.SetDeadline(deadline)
	w.buf = append(w.buf[:0], w.head...)
	for _, h := range extra {
		w.buf = fmt.Appendf(w.buf, "%s: %s\r\n", h.Name, h.Value)
	}
	w.buf = fmt.Appendf(w.buf, "Content-Length: %d\r\n\r\n", len(body))
	if _, err = w.conn.Write(w.buf); err != nil {
		return 0, 0, false, false, err
	}
	// Wait for "100 Continue" (or a final answer), expectWait at most.
	w.conn.SetReadDeadline(minDeadline(deadline, time.Now().Add(expectWait)))
	status, closeAfter, expired, n, err := w.readResponse()
	var ne net.Error
	switch {
	case err != nil && errors.As(err, &ne) && ne.Timeout() && time.Now().Before(deadline):
		status = 100 // no answer in time: send the body, as curl does
	case err != nil:
		return 0, 0, false, false, err
	}
	w.conn.SetReadDeadline(deadline)
	if status == 100 {
		if _, err = w.conn.Write(body); err != nil {
			return 0, 0, true, false, err
		}
		sentBody = true
		if status, closeAfter, expired, n, err = w.readResponse(); err != nil {
			return 0, 0, true, false, err
		}
	}
	if closeAfter || !sentBody && len(body) > 0 {
		// A final answer before the body: the server closes the connection (it cannot know
		// whether the body was started), and the next request goes on a new one.
		w.close()
	}
	return status, n, sentBody, expired, nil
}

func minDeadline(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// readResponse reads one response (a 1xx is returned as is, with no body) and reports its
// status, whether the server closes the connection after it, whether it marks a refusal given
// after a wait (RefusalHeader: RefusalExpired), and its body's size.
func (w *expectWorker) readResponse() (status int, closeAfter, expired bool, n int64, err error) {
	tp := textproto.NewReader(w.br)
	line, err := tp.ReadLine()
	if err != nil {
		return 0, false, false, 0, err
	}
	_, code, ok := strings.Cut(line, " ")
	if len(code) < 3 || !ok {
		return 0, false, false, 0, fmt.Errorf("loadtest: malformed status line %q", line)
	}
	if status, err = strconv.Atoi(code[:3]); err != nil {
		return 0, false, false, 0, fmt.Errorf("loadtest: malformed status line %q", line)
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil {
		return 0, false, false, 0, err
	}
	if status >= 100 && status < 200 {
		return status, false, false, 0, nil
	}
	closeAfter = strings.EqualFold(hdr.Get("Connection"), "close")
	expired = hdr.Get(RefusalHeader) == RefusalExpired
	if cl := hdr.Get("Content-Length"); cl != "" {
		size, err := strconv.ParseInt(cl, 10, 64)
		if err != nil || size < 0 {
			return 0, false, false, 0, fmt.Errorf("loadtest: malformed Content-Length %q", cl)
		}
		n, err = io.CopyN(io.Discard, w.br, size)
		return status, closeAfter, expired, n, err
	}
	// No length (the gateway always sends one): the body runs to the connection's end.
	n, err = io.Copy(io.Discard, w.br)
	return status, true, expired, n, err
}
