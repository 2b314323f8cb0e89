package channels

import (
	"context"
	"time"

	"github.com/coder/websocket"
)

// Transport carries a socket's outbound frames. The socket's reading side
// feeds inbound frames to Socket.Receive itself, so a Transport has no Read.
type Transport interface {
	// Write writes frames in order. It is called by one goroutine at a time.
	// It must not block forever: a stuck write delays the socket's close.
	// The socket passes a context without deadline and expects the
	// transport to apply its own write timeout.
	Write(ctx context.Context, frames []Frame) error
	// Close closes the connection with code and reason. It is called at most
	// once, from the writer goroutine, and may block for the close handshake.
	// It must make the reading side stop.
	Close(code CloseCode, reason string) error
}

// wsTransport adapts a coder/websocket connection. A batch is written with
// one syscall through cork (nil: one write per message), bounded by timeout.
// readDone is closed when the reading side (sockReader) has stopped.
type wsTransport struct {
	conn     *websocket.Conn
	cork     *corkWriter
	timeout  time.Duration
	readDone chan struct{}
}

// closeHandshakeTimeout bounds how long a close waits for the client's
// close frame (or end of stream) before dropping the connection.
const closeHandshakeTimeout = 5 * time.Second

func (t wsTransport) Write(ctx context.Context, frames []Frame) error {
	if t.cork == nil {
		ctx, cancel := context.WithTimeout(ctx, t.timeout)
		defer cancel()
		return t.writeAll(ctx, frames)
	}
	// The messages land in memory; only the uncork touches the network.
	t.cork.cork()
	err := t.writeAll(ctx, frames)
	if uerr := t.cork.uncork(t.timeout); err == nil {
		err = uerr
	}
	return err
}

func (t wsTransport) writeAll(ctx context.Context, frames []Frame) error {
	for _, f := range frames {
		typ := websocket.MessageText
		if f.Binary {
			typ = websocket.MessageBinary
		}
		if err := t.conn.Write(ctx, typ, f.Data); err != nil {
			return err
		}
	}
	return nil
}

// Close writes the close frame whole (after the rest of a failed write) or
// not at all (corkWriter.closeFrame), then finishes the close handshake: the
// reading side goes on reading and discarding input until the client's close
// frame or the end of the stream, for at most closeHandshakeTimeout, so the
// connection is not closed with unread input (which would reset it and could
// discard the close frame at the client before it is read).
func (t wsTransport) Close(code CloseCode, reason string) error {
	if t.cork == nil {
		return t.conn.Close(websocket.StatusCode(code), reason)
	}
	t.cork.closeFrame(code, reason, max(t.timeout, closeHandshakeTimeout))
	timer := time.NewTimer(closeHandshakeTimeout)
	select {
	case <-t.readDone:
	case <-timer.C:
	}
	timer.Stop()
	return t.conn.CloseNow()
}
