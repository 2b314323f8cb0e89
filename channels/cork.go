package channels

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"time"
)

// corkWriter sits between the WebSocket library's buffered writer and the
// connection, and is the only thing that writes to the connection. The
// library flushes after every message; while a batch is corked those flushes
// collect in memory, and uncork writes the whole batch with one syscall under
// one write deadline. Outside a batch (a pong or close frame written by the
// library itself) writes go straight to the connection.
//
// No frame is ever torn on the wire by what follows it: only complete frames
// are written (the library writes a frame under its own lock; a batch holds
// complete frames), one write at a time. Bytes that arrive while a write is
// in progress are appended behind it (out) and written by the writing
// goroutine. When a write fails part-way, the unwritten rest stays at the
// head of out and nothing else is written until closeFrame: it writes that
// rest first and the close frame only after it went out whole, or else
// writes nothing more (the client sees the connection end without a close
// frame, never a close frame glued to half a message).
type corkWriter struct {
	conn net.Conn

	mu       sync.Mutex
	corked   bool
	buf      *[]byte // the batch being built; guarded by mu
	busy     bool    // a goroutine is writing to conn; guarded by mu
	timed    bool    // the write in progress has a deadline; guarded by mu
	out      []byte  // bytes to write after the write in progress, or the rest of a failed write; guarded by mu
	failed   bool    // a write failed: out starts with its unwritten rest; guarded by mu
	sealed   bool    // the close frame was written or queued: later bytes are dropped; guarded by mu
	closeReq bool    // the library closed the connection during a batch or write; guarded by mu
}

// corkConn is the connection as the WebSocket library sees it: its Close
// waits for the batch being built or written (a write with a deadline). The
// library closes right after echoing a client's close frame, which may sit
// in a corked batch behind the batch's frames; closing then would lose both.
// A write without a deadline (the library's own pong or close frame) is not
// waited for: closing the connection is how the library bounds it.
type corkConn struct {
	net.Conn
	w *corkWriter
}

func (c corkConn) Close() error {
	w := c.w
	w.mu.Lock()
	if w.corked || (w.busy && w.timed) {
		w.closeReq = true
		w.mu.Unlock()
		return nil
	}
	w.mu.Unlock()
	return c.Conn.Close()
}

// closeIfRequestedLocked performs a Close the library asked for during a
// batch or write. Callers hold mu and have just cleared corked or busy.
func (w *corkWriter) closeIfRequestedLocked() {
	if w.closeReq && !w.corked && !w.busy {
		w.closeReq = false
		_ = w.conn.Close()
	}
}

// batchBufs recycles batch buffers so an idle socket holds none.
var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooledBatch bounds the capacity of a buffer returned to the pool.
const maxPooledBatch = 64 << 10

// errEarlierWriteFailed: bytes were kept behind the rest of a failed write.
var errEarlierWriteFailed = errors.New("channels: an earlier write failed")

// Write takes a flush of the library's buffered writer: whole frames, or
// part of a frame larger than the buffer (followed by the rest of it before
// any other frame, since the library holds its frame lock).
func (w *corkWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	switch {
	case w.sealed, w.failed:
		// After our close frame, the library's own close frame or a pong
		// would follow a close, which the protocol forbids; after a failed
		// write the connection is closing and only closeFrame writes. The
		// library is told the write succeeded so that it keeps reading:
		// input is drained for the close handshake, not left unread.
		w.mu.Unlock()
		return len(p), nil
	case w.corked:
		*w.buf = append(*w.buf, p...)
		w.mu.Unlock()
		return len(p), nil
	case w.busy:
		w.out = append(w.out, p...)
		w.mu.Unlock()
		return len(p), nil
	}
	w.busy = true
	w.mu.Unlock()
	if err := w.writeOut(p, 0); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writeOut writes p, then whatever was appended to out meanwhile, with a
// deadline of timeout per write (0: none). The caller has set busy; writeOut
// clears it. On failure the unwritten rest is kept at the head of out.
func (w *corkWriter) writeOut(p []byte, timeout time.Duration) error {
	w.mu.Lock()
	w.timed = timeout > 0
	w.mu.Unlock()
	for {
		if timeout > 0 {
			_ = w.conn.SetWriteDeadline(time.Now().Add(timeout))
		}
		n, err := w.conn.Write(p)
		if timeout > 0 {
			_ = w.conn.SetWriteDeadline(time.Time{})
		}
		w.mu.Lock()
		if err != nil {
			rest := make([]byte, 0, len(p)-n+len(w.out))
			w.out = append(append(rest, p[n:]...), w.out...)
			w.failed, w.busy = true, false
			w.closeIfRequestedLocked()
			w.mu.Unlock()
			return err
		}
		if len(w.out) == 0 {
			w.busy = false
			w.closeIfRequestedLocked()
			w.mu.Unlock()
			return nil
		}
		p, w.out = w.out, nil
		w.mu.Unlock()
	}
}

// cork starts a batch.
func (w *corkWriter) cork() {
	w.mu.Lock()
	w.corked = true
	w.buf = batchBufs.Get().(*[]byte)
	w.mu.Unlock()
}

// uncork ends the batch and writes it, bounded by timeout.
func (w *corkWriter) uncork(timeout time.Duration) error {
	w.mu.Lock()
	w.corked = false
	b := w.buf
	w.buf = nil
	var err error
	switch {
	case len(*b) == 0 || w.sealed:
		w.closeIfRequestedLocked()
		w.mu.Unlock()
	case w.failed:
		w.closeIfRequestedLocked()
		w.mu.Unlock()
		err = errEarlierWriteFailed
	case w.busy: // a pong is being written: the batch goes right after it
		w.out = append(w.out, *b...)
		w.mu.Unlock()
	default:
		w.busy = true
		w.mu.Unlock()
		err = w.writeOut(*b, timeout)
	}
	if cap(*b) <= maxPooledBatch {
		*b = (*b)[:0]
		batchBufs.Put(b)
	}
	return err
}

// closeFrame writes a close frame with code and reason (at most 123 bytes),
// after the rest of a failed write if there is one, each write bounded by
// timeout; afterwards every byte is dropped. It reports whether the close
// frame went out whole. It is called once, by the socket's writer, never
// during a batch.
func (w *corkWriter) closeFrame(code CloseCode, reason string, timeout time.Duration) bool {
	var frame [2 + 2 + 123]byte
	if len(reason) > 123 {
		reason = reason[:123]
	}
	frame[0] = 0x88 // FIN, opcode close
	frame[1] = byte(2 + len(reason))
	binary.BigEndian.PutUint16(frame[2:], uint16(code))
	n := 4 + copy(frame[4:], reason)
	w.mu.Lock()
	if w.sealed {
		w.mu.Unlock()
		return false
	}
	w.sealed = true
	if w.busy { // a pong is being written; the frame follows it
		w.out = append(w.out, frame[:n]...)
		w.mu.Unlock()
		return true
	}
	rest := w.out
	w.out, w.failed, w.busy = nil, false, true
	w.mu.Unlock()
	if len(rest) > 0 {
		if w.writeOut(rest, timeout) != nil {
			return false // the torn frame could not be finished: no close frame
		}
		w.mu.Lock()
		w.busy = true
		w.mu.Unlock()
	}
	return w.writeOut(frame[:n], timeout) == nil
}
