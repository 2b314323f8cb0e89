package channels

import (
	"net"
	"sync"
	"time"
)

// corkWriter sits between the WebSocket library's buffered writer and the
// connection. The library flushes after every message; while a batch is
// corked those flushes collect in memory, and uncork writes the whole batch
// with one syscall under one write deadline. Outside a batch (a pong or close
// frame written by the library itself) writes go straight to the connection.
// Whole frames are never split between the two paths: the library writes a
// frame under its own lock, and uncork writes complete frames only.
type corkWriter struct {
	conn net.Conn

	mu     sync.Mutex
	corked bool
	buf    *[]byte
}

// batchBufs recycles batch buffers so an idle socket holds none.
var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooledBatch bounds the capacity of a buffer returned to the pool.
const maxPooledBatch = 64 << 10

func (w *corkWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.corked {
		*w.buf = append(*w.buf, p...)
		w.mu.Unlock()
		return len(p), nil
	}
	w.mu.Unlock()
	return w.conn.Write(p)
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
	w.mu.Unlock()
	var err error
	if len(*b) > 0 {
		_ = w.conn.SetWriteDeadline(time.Now().Add(timeout))
		_, err = w.conn.Write(*b)
		// Writes outside a batch (pongs, the close frame) carry no deadline.
		_ = w.conn.SetWriteDeadline(time.Time{})
	}
	if cap(*b) <= maxPooledBatch {
		*b = (*b)[:0]
		batchBufs.Put(b)
	}
	return err
}
