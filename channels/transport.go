package channels

import (
	"context"
	"time"

	"github.com/coder/websocket"
)

// Transport carries a socket's outbound frames. The socket's reading side
// feeds inbound frames to Socket.Receive itself, so a Transport has no Read.
type Transport interface {
	// Write writes frames in order. It is called by one goroutine at a time
	// (a goroutine of the socket's own while it has frames to write).
	// It must not block forever: a stuck write delays the socket's close.
	// The socket passes a context without deadline and expects the
	// transport to apply its own write timeout.
	Write(ctx context.Context, frames []Frame) error
	// Close closes the connection with code and reason. It is called at most
	// once, after the last Write, and may block for the close handshake.
	// It must make the reading side stop.
	Close(code CloseCode, reason string) error
}

// asyncTransport is a Transport whose writes never block the caller, so
// the endpoint's bounded pool of write workers can serve its sockets
// (writeSched). A write either finishes (parked false) or, when the peer
// does not take the bytes fast enough, is parked: it goes on without the
// caller, which is told the outcome through done, called once from another
// goroutine. frames are not referenced after writeAsync returns.
type asyncTransport interface {
	Transport
	writeAsync(frames []Frame, done func(error)) (parked bool, err error)
	// expireParked fails a write parked since before `before` (monoNow
	// units) with os.ErrDeadlineExceeded; it reports whether it did.
	expireParked(before int64) bool
	// isParked reports whether a write is parked.
	isParked() bool
}

// wsTransport writes a socket's frames straight to the connection as
// server WebSocket frames through its connWriter, one write per batch;
// the WebSocket library (conn) keeps the handshake, reading, pongs and its
// close-frame echo. A broadcast frame's framed bytes are built once and
// shared by all sockets (Frame.wsBytes); a batch of one such frame is
// written from them without a copy, a larger batch is framed into one
// pooled buffer. readDone is closed when the reading side
// (sockReader) has stopped.
type wsTransport struct {
	conn     *websocket.Conn
	w        *connWriter
	timeout  time.Duration
	readDone chan struct{}
}

// closeHandshakeTimeout bounds how long a close waits for the client's
// close frame (or end of stream) before dropping the connection.
const closeHandshakeTimeout = 5 * time.Second

func (t wsTransport) writeAsync(frames []Frame, done func(error)) (bool, error) {
	switch len(frames) {
	case 0:
		return false, nil
	case 1:
		if frames[0].wire != nil {
			return t.w.writeData(frames[0].wsBytes(), nil, done)
		}
	}
	buf := batchBufs.Get().(*[]byte)
	for i := range frames {
		*buf = appendWSFrame(*buf, &frames[i])
	}
	return t.w.writeData(*buf, buf, done)
}

func (t wsTransport) expireParked(before int64) bool { return t.w.expireParked(before) }

func (t wsTransport) isParked() bool {
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	return t.w.parkedSince != 0
}

// Write writes frames and waits for the outcome: a write that the client
// does not take within the write timeout fails with
// os.ErrDeadlineExceeded. Sockets of an endpoint use writeAsync instead.
func (t wsTransport) Write(_ context.Context, frames []Frame) error {
	ch := make(chan error, 1)
	parked, err := t.writeAsync(frames, func(err error) { ch <- err })
	if !parked {
		return err
	}
	timer := time.NewTimer(t.timeout)
	defer timer.Stop()
	select {
	case err := <-ch:
		return err
	case <-timer.C:
		t.w.expireParked(monoNow() + 1)
		return <-ch
	}
}

// Close writes the close frame whole (after the rest of a failed write) or
// not at all (connWriter.closeFrame), then finishes the close handshake: the
// reading side goes on reading and discarding input until the client's close
// frame or the end of the stream, for at most closeHandshakeTimeout, so the
// connection is not closed with unread input (which would reset it and could
// discard the close frame at the client before it is read).
func (t wsTransport) Close(code CloseCode, reason string) error {
	t.w.closeFrame(code, reason, max(t.timeout, closeHandshakeTimeout))
	timer := time.NewTimer(closeHandshakeTimeout)
	select {
	case <-t.readDone:
	case <-timer.C:
	}
	timer.Stop()
	return t.conn.CloseNow()
}
