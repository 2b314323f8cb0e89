package channels

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// connWriter is the only thing that writes to a WebSocket connection. Two
// kinds of writes reach it:
//
//   - data: whole server frames built by the socket's writer (wsTransport),
//     written with writeData: one write per batch, attempted without
//     blocking (a write worker must never wait on one slow client); when
//     the kernel's send buffer is full the rest goes out on a goroutine of
//     its own (the write is parked) and the worker moves on;
//   - control: frames the WebSocket library writes itself (a pong, its
//     close-frame echo), through Write, on the reading goroutine. The
//     library's buffered writer is big enough for any control frame and is
//     flushed after each, so every Write is exactly one whole frame.
//
// No frame is ever torn on the wire by what follows it: only whole frames
// are written, one write at a time (busy). Bytes that arrive while a write
// is in progress are appended behind it (out) and written by the goroutine
// that is writing. When a write fails part-way, the unwritten rest stays at
// the head of out and nothing else is written until closeFrame: it writes
// that rest first and the close frame only after it went out whole, or else
// writes nothing more (the client sees the connection end without a close
// frame, never a close frame glued to half a message). Nothing is written
// after a close frame, ours or the library's (sealed).
//
// A parked data write has no deadline of its own: a sweep (writeSched)
// calls expireParked for writes parked longer than the write timeout,
// which sets a deadline in the past on the connection and so fails the
// write with os.ErrDeadlineExceeded. Writes that do not block, the common
// case, cost no deadline call at all.
type connWriter struct {
	conn net.Conn
	raw  syscall.RawConn // for non-blocking attempts; nil: every data write is parked

	mu          sync.Mutex
	busy        bool        // a goroutine is writing to conn; guarded by mu
	data        bool        // the write in progress is a data write; guarded by mu
	out         []byte      // bytes to write after the write in progress, or the rest of a failed write; guarded by mu
	failed      bool        // a write failed: out starts with its unwritten rest; guarded by mu
	sealed      bool        // a close frame was written or queued: later bytes are dropped; guarded by mu
	closeReq    bool        // the library closed the connection during a data write; guarded by mu
	parkedSince int64       // monoNow when a data write parked (0: none); guarded by mu
	pending     func(error) // finish of data queued behind a control write, called when out is written or fails; guarded by mu
	expired     bool        // expireParked set a past deadline; guarded by mu
}

// newConnWriter returns the writer of c; a c that exposes its descriptor
// (syscall.Conn, as a TCP connection does) gets non-blocking data writes.
func newConnWriter(c net.Conn) *connWriter {
	w := &connWriter{conn: c}
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil && canTryWrite {
			w.raw = rc
		}
	}
	return w
}

// writerConn is the connection as the WebSocket library sees it: its Close
// waits for a data write in progress (bounded by the write timeout through
// the sweep). The library closes right after echoing a client's close
// frame, which may sit queued behind a data write; closing then would lose
// both. A control write is not waited for: closing the connection is how
// the library bounds it.
type writerConn struct {
	net.Conn
	w *connWriter
}

func (c writerConn) Close() error {
	w := c.w
	w.mu.Lock()
	if w.busy && w.data {
		w.closeReq = true
		w.mu.Unlock()
		return nil
	}
	w.mu.Unlock()
	return c.Conn.Close()
}

// closeIfRequestedLocked performs a Close the library asked for during a
// data write. Callers hold mu and have just cleared busy.
func (w *connWriter) closeIfRequestedLocked() {
	if w.closeReq && !w.busy {
		w.closeReq = false
		_ = w.conn.Close()
	}
}

// maxPendingControl bounds the bytes held in out behind a write in
// progress when the library writes a control frame: pongs beyond it are
// dropped (a close frame never is). 4 KiB holds 32 pongs of the largest
// ping payload (125 bytes).
const maxPendingControl = 4 << 10

// batchBufs recycles batch buffers so an idle socket holds none.
var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooledBatch bounds the capacity of a buffer returned to the pool.
const maxPooledBatch = 64 << 10

// putBatchBuf returns b to the pool (nil: nothing).
func putBatchBuf(b *[]byte) {
	if b != nil && cap(*b) <= maxPooledBatch {
		*b = (*b)[:0]
		batchBufs.Put(b)
	}
}

// errEarlierWriteFailed: bytes were kept behind the rest of a failed write.
var errEarlierWriteFailed = errors.New("channels: an earlier write failed")

// isCloseFrame reports whether p starts with a close frame's first byte.
func isCloseFrame(p []byte) bool { return len(p) > 0 && p[0]&0x0f == 0x8 }

// Write takes one whole control frame from the library (a flush of its
// buffered writer). It blocks while writing, as the library expects.
func (w *connWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	switch {
	case w.sealed, w.failed:
		// After a close frame, a pong or the library's own close frame
		// would follow a close, which the protocol forbids; after a failed
		// write the connection is closing and only closeFrame writes. The
		// library is told the write succeeded so that it keeps reading:
		// input is drained for the close handshake, not left unread.
		w.mu.Unlock()
		return len(p), nil
	case w.busy:
		if !isCloseFrame(p) && len(w.out)+len(p) > maxPendingControl {
			// A client pinging while it does not read would otherwise grow
			// out without bound until the stalled write times out. RFC 6455
			// §5.5.3 lets an endpoint leave earlier pings unanswered.
			w.mu.Unlock()
			return len(p), nil
		}
		w.out = append(w.out, p...)
		w.sealed = isCloseFrame(p)
		w.mu.Unlock()
		return len(p), nil
	}
	w.busy = true
	w.sealed = isCloseFrame(p)
	w.mu.Unlock()
	if err := w.writeOut(p, 0); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writeData writes p, whole frames, as one write without blocking the
// caller. buf, when not nil, is the pooled buffer holding p; it goes back
// to the pool once p is no longer needed. p is not modified.
//
// It returns parked=false when the write is over: written, dropped (after a
// close frame) or failed (err). It returns parked=true when the kernel took
// only part of p: the rest, then anything queued behind it, is written by a
// goroutine of its own, which calls finish with the outcome once; the
// connWriter stays busy until then. p queued behind a control frame being
// written is parked too: the control frame's writer writes it and calls
// finish; expireParked bounds both.
func (w *connWriter) writeData(p []byte, buf *[]byte, finish func(error)) (parked bool, err error) {
	w.mu.Lock()
	switch {
	case w.sealed:
		w.mu.Unlock()
		putBatchBuf(buf)
		return false, nil
	case w.failed:
		w.mu.Unlock()
		putBatchBuf(buf)
		return false, errEarlierWriteFailed
	case w.busy: // a control frame is being written: p follows it, parked
		// Parked rather than reported written: the control write may block
		// (a client that stopped reading), and a writer told its frames went
		// out would move its whole queue here, past the queue's limits and
		// the write timeout.
		w.out = append(w.out, p...)
		w.pending = finish
		w.parkedSince = max(monoNow(), 1)
		w.mu.Unlock()
		putBatchBuf(buf)
		return true, nil
	}
	w.busy, w.data = true, true
	w.mu.Unlock()
	for {
		n := 0
		if w.raw != nil {
			n, err = tryWrite(w.raw, p)
		}
		if err != nil {
			w.mu.Lock()
			w.keepRestLocked(p, n)
			w.mu.Unlock()
			putBatchBuf(buf)
			return false, err
		}
		if n < len(p) {
			w.mu.Lock()
			w.parkedSince = max(monoNow(), 1)
			w.mu.Unlock()
			go w.finishParked(p[n:], buf, finish)
			return true, nil
		}
		w.mu.Lock()
		if len(w.out) == 0 {
			w.busy, w.data = false, false
			w.closeIfRequestedLocked()
			w.mu.Unlock()
			putBatchBuf(buf)
			return false, nil
		}
		putBatchBuf(buf)
		buf = nil
		p, w.out = w.out, nil
		w.mu.Unlock()
	}
}

// finishParked writes rest and what queues behind it, blocking, then
// reports the outcome to finish.
func (w *connWriter) finishParked(rest []byte, buf *[]byte, finish func(error)) {
	err := w.writeOut(rest, 0)
	putBatchBuf(buf)
	w.mu.Lock()
	w.parkedSince = 0
	if w.expired {
		w.expired = false
		_ = w.conn.SetWriteDeadline(time.Time{})
	}
	w.mu.Unlock()
	finish(err)
}

// expireParked fails a data write that has been parked since before
// `before` (monoNow units) by setting a past write deadline; it reports
// whether it did. The deadline is cleared when the write returns, before
// anything else is written.
func (w *connWriter) expireParked(before int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.parkedSince == 0 || w.parkedSince >= before || w.expired {
		return false
	}
	w.expired = true
	_ = w.conn.SetWriteDeadline(time.Unix(1, 0))
	return true
}

// keepRestLocked records a write of p that failed after n bytes: the rest
// goes to the head of out and nothing but closeFrame writes from now on.
// Callers hold mu; busy is cleared.
func (w *connWriter) keepRestLocked(p []byte, n int) {
	n = max(n, 0)
	rest := make([]byte, 0, len(p)-n+len(w.out))
	w.out = append(append(rest, p[n:]...), w.out...)
	w.failed, w.busy, w.data = true, false, false
	w.closeIfRequestedLocked()
}

// writeOut writes p, then whatever was appended to out meanwhile, with a
// deadline of timeout per write (0: none). The caller has set busy; writeOut
// clears it. On failure the unwritten rest is kept at the head of out.
func (w *connWriter) writeOut(p []byte, timeout time.Duration) error {
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
			w.keepRestLocked(p, n)
			finish := w.takePendingLocked()
			w.mu.Unlock()
			if finish != nil {
				finish(err)
			}
			return err
		}
		if len(w.out) == 0 {
			w.busy, w.data = false, false
			w.closeIfRequestedLocked()
			finish := w.takePendingLocked()
			w.mu.Unlock()
			if finish != nil {
				finish(nil)
			}
			return nil
		}
		p, w.out = w.out, nil
		w.mu.Unlock()
	}
}

// takePendingLocked returns the finish of data parked behind a control write
// (nil: none) and ends its parking, clearing an expired deadline. Callers
// hold mu.
func (w *connWriter) takePendingLocked() func(error) {
	finish := w.pending
	if finish == nil {
		return nil
	}
	w.pending = nil
	w.parkedSince = 0
	if w.expired {
		w.expired = false
		_ = w.conn.SetWriteDeadline(time.Time{})
	}
	return finish
}

// closeFrame writes a close frame with code and reason (at most 123 bytes),
// after the rest of a failed write if there is one, each write bounded by
// timeout; afterwards every byte is dropped. It reports whether the close
// frame went out whole (or was queued behind a control frame being
// written). It is called once, by the socket's writer, never while one of
// its data writes is in progress.
func (w *connWriter) closeFrame(code CloseCode, reason string, timeout time.Duration) bool {
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
	w.out, w.failed, w.busy, w.data = nil, false, true, true
	w.mu.Unlock()
	if len(rest) > 0 {
		if w.writeOut(rest, timeout) != nil {
			return false // the torn frame could not be finished: no close frame
		}
		w.mu.Lock()
		w.busy, w.data = true, true
		w.mu.Unlock()
	}
	return w.writeOut(frame[:n], timeout) == nil
}
