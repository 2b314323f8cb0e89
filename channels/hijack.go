package channels

import (
	"bufio"
	"io"
	"net"
	"net/http"
)

// Buffer sizes of an upgraded connection. net/http hands a hijacked
// connection over with 4 KiB read and write buffers, which the WebSocket
// library keeps for the connection's life: 8 KiB of every idle socket. Client
// frames are small (joins, pushes, heartbeats) and server frames are written
// one message at a time, so smaller buffers cost a few more syscalls only for
// messages larger than them. The read buffer holds any frame header (at most
// 14 bytes) and a heartbeat with its header (about 50 bytes); a larger
// message is read in pieces, most of them straight into the message's own
// buffer (bufio skips its buffer for reads at least its size).
const (
	connReadBuffer  = 256
	connWriteBuffer = 256 // the library writes control frames only (≤ 127 bytes), one per flush
)

// smallBufWriter hands coder/websocket a hijacked connection with small
// buffers, writing through a connWriter (kept in cork): the socket's writer
// writes data frames to it directly, the library its control frames. Bytes
// net/http had already buffered are carried over.
type smallBufWriter struct {
	http.ResponseWriter
	cork *connWriter
	conn net.Conn      // the hijacked connection
	br   *bufio.Reader // its read buffer, as handed to the WebSocket library
	// early: the client sent bytes right behind the upgrade request. The
	// library moves them out of br into a reader of its own, where no
	// readiness poller sees them, so the socket's reader must read at once.
	early bool
}

func (w *smallBufWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	var src io.Reader = c
	n := brw.Reader.Buffered()
	if n > 0 {
		early := make([]byte, n)
		_, _ = io.ReadFull(brw.Reader, early)
		src = io.MultiReader(&onceReader{b: early}, c)
	}
	br := bufio.NewReaderSize(src, max(connReadBuffer, n))
	if n > 0 {
		// Pull the early bytes into the new buffer: the WebSocket library
		// keeps what is buffered and reads the rest from c directly.
		_, _ = br.Peek(n)
	}
	w.cork = newConnWriter(c)
	w.conn, w.br, w.early = c, br, n > 0
	return writerConn{Conn: c, w: w.cork}, bufio.NewReadWriter(br, bufio.NewWriterSize(w.cork, connWriteBuffer)), nil
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *smallBufWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// onceReader yields b, then io.EOF.
type onceReader struct{ b []byte }

func (r *onceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}
