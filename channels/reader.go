package channels

import (
	"bufio"
	"context"
	"io"
	"sync/atomic"
	"syscall"

	"github.com/coder/websocket"
)

// sockReader is the reading side of one WebSocket socket: it reads the
// client's messages and feeds them to Socket.Receive, one at a time, in
// arrival order.
//
// # No goroutine per idle socket
//
// An idle joined socket used to hold a reader goroutine parked deep inside
// the WebSocket library (15 frames under Endpoint's read loop), whose stack
// the join had grown to 8 KiB: with its g, 8.8 KiB of an idle socket's
// 15.8 KiB of heap and stack. Where the platform has a readiness poller
// (Linux: readPoller, one epoll instance for the process), a socket has no
// goroutine while nothing is to be read. Its connection is registered
// level-triggered and one-shot (EPOLLIN | EPOLLONESHOT); when the kernel has
// bytes for it, a goroutine is started (run) that reads messages while the
// connection's read buffer still holds bytes, then re-arms the registration
// and exits. A goroutine reading a message whose bytes have not all
// arrived parks in the runtime's poller as any Go read does, so a split
// frame costs that one socket a goroutine until the rest arrives, never a
// worker of a shared pool.
//
// A wait shallow enough for the GC to shrink the stack (a goroutine parked
// in syscall.RawConn.Read with a MSG_PEEK callback, only then calling the
// library) was the smaller alternative: it keeps the g (509 B) and a 2–4
// KiB stack per socket, which leaves RSS above 12 KiB once GC headroom (RSS
// is about twice live heap and stack) is counted.
//
// Limits: the library's Conn.Reader answers control frames (ping, pong)
// and goes on waiting for a data frame, so a client that sends a WebSocket
// ping while otherwise idle keeps a goroutine until its next message.
// Browsers never send pings (Phoenix clients send heartbeats as messages),
// so this costs nothing in practice. Once the socket is closing, or when the
// poller is not available (other platforms, a connection that is not TCP,
// a failed epoll call), the reader is one goroutine per socket reading
// until the connection ends, as before (loop).
//
// Exactly one goroutine reads at a time: state moves idle → running (the
// wake that starts run) → idle (run re-armed and exits); a wake while
// running sets woken, and run then reads again instead of exiting.
type sockReader struct {
	e        *Endpoint
	conn     *websocket.Conn
	br       *bufio.Reader // the connection's read buffer, shared with conn
	s        *Socket
	readDone chan struct{} // closed when reading has stopped

	discarding bool // the socket is closing: input is read and discarded; touched by the reading goroutine only

	state  atomic.Int32    // readIdle, readRunning or readWoken
	closed atomic.Bool     // the transport closed the connection: a wake reads to the end
	id     uint64          // key in the poller (never the fd: fd numbers are reused)
	rc     syscall.RawConn // the connection's fd while polled; nil: not polled
}

// Reader states (sockReader.state).
const (
	readIdle    = iota // registered and armed; no goroutine
	readRunning        // a goroutine reads
	readWoken          // a goroutine reads and a wake arrived meanwhile
)

// readOne reads one message and handles it. It reports false when reading
// has ended (the connection failed or closed, or the close handshake
// finished). A message over MaxFrameBytes closes the socket with 1009. Once
// the socket is closing, input is read and discarded (the library still
// answers pings, the rest of an over-size message is skipped) until the
// client's close frame or the end of the stream: the close handshake
// completes and the connection is never closed with unread input, which
// would reset it before the client reads the close frame.
func (r *sockReader) readOne() bool {
	e, s := r.e, r.s
	typ, rd, err := r.conn.Reader(context.Background())
	if err != nil {
		e.cfg.Tracer.Emit("socket.read_end", "socket", s.id, "code", int(websocket.CloseStatus(err)))
		return false
	}
	if r.discarding {
		_, err := io.Copy(io.Discard, rd)
		return err == nil
	}
	limit := e.cfg.MaxFrameBytes
	data, err := io.ReadAll(&io.LimitedReader{R: rd, N: limit + 1})
	if err != nil {
		return false
	}
	if int64(len(data)) > limit {
		e.stats.badFrames.Add(1)
		e.cfg.Tracer.Emit("socket.too_big", "socket", s.id)
		s.closeWith(CloseTooBig, CloseTooBig.String())
		r.discarding = true
		_, err := io.Copy(io.Discard, rd)
		return err == nil
	}
	if s.Receive(Frame{Data: data, Binary: typ == websocket.MessageBinary}) != nil {
		r.discarding = true
	}
	return true
}

// loop reads until the connection ends, then finishes.
func (r *sockReader) loop() {
	for r.readOne() {
	}
	r.finish()
}

// run is the goroutine a wake starts: it reads messages while the read
// buffer holds bytes, then re-arms the poller registration and exits (a
// wake that arrived meanwhile makes it read again).
func (r *sockReader) run(force bool) {
	for {
		if !force && r.br.Buffered() == 0 && !r.closed.Load() && !readPoller.pending(r) {
			// Woken with nothing to read: the bytes that caused the wake
			// were read by the run before. Go idle instead of waiting in
			// Reader for the next message.
			r.e.cfg.Tracer.Emit("socket.read_spurious", "socket", r.s.id)
			if !r.idle() {
				return
			}
			continue
		}
		force = false
		if !r.readOne() {
			r.finish()
			return
		}
		if r.discarding {
			r.loop()
			return
		}
		if r.br.Buffered() > 0 {
			force = true // buffered bytes: read on without asking the kernel
			continue
		}
		if !r.idle() {
			return
		}
	}
}

// idle re-arms the registration and lets the goroutine go. It reports true
// when the goroutine must read again instead (a wake arrived meanwhile),
// false when it is done (idle, or the socket was read to its end on this
// goroutine because the connection closed or the poller failed).
func (r *sockReader) idle() bool {
	if !readPoller.arm(r) {
		// Reader reports the end.
		r.loop()
		return false
	}
	if r.state.CompareAndSwap(readRunning, readIdle) {
		r.e.cfg.Tracer.Emit("socket.read_idle", "socket", r.s.id)
		return false
	}
	r.state.Store(readRunning) // woken while running
	return true
}

// wake starts a reading goroutine unless one runs, in which case that one
// reads again before it goes idle. The poller calls it when the connection
// is readable; the transport calls it after closing the connection (a
// closed connection is dropped from the poller without an event).
func (r *sockReader) wake() {
	for {
		switch r.state.Load() {
		case readIdle:
			if r.state.CompareAndSwap(readIdle, readRunning) {
				go r.run(false)
				return
			}
		case readRunning:
			if r.state.CompareAndSwap(readRunning, readWoken) {
				return
			}
		default:
			return
		}
	}
}

// finish ends the socket once reading has stopped: it leaves the poller,
// closes readDone (the transport's close waits for it), then ends the
// socket.
func (r *sockReader) finish() {
	if r.rc != nil {
		readPoller.remove(r)
	}
	close(r.readDone)
	r.s.End()
}

// newSockReader returns the reader of conn (read buffer br) in state
// readRunning: a wake before start (the socket closed while attaching) is
// kept as readWoken, and start reads at once.
func newSockReader(e *Endpoint, conn *websocket.Conn, br *bufio.Reader) *sockReader {
	r := &sockReader{e: e, conn: conn, br: br, readDone: make(chan struct{})}
	r.state.Store(readRunning)
	return r
}

// start begins reading s: through the poller when it takes the connection
// (rc), else on a goroutine of its own. With early set (bytes the client
// sent right behind the handshake, held where the poller does not see
// them) or bytes already buffered, the first read starts at once.
func (r *sockReader) start(s *Socket, rc syscall.RawConn, early bool) {
	r.s = s
	now := early || r.br.Buffered() > 0
	if rc != nil && readPoller.add(r, rc, !now) {
		if !now && r.state.CompareAndSwap(readRunning, readIdle) {
			return
		}
		// Input is waiting, or a wake came while attaching (input, or
		// the socket closed).
		r.state.Store(readRunning)
		go r.run(now)
		return
	}
	go r.loop()
}

// pollTransport is the WebSocket transport of a polled socket: after the
// connection is closed it wakes the reader, which then sees the end (the
// kernel drops a closed connection from the poller without an event).
type pollTransport struct {
	wsTransport
	r *sockReader
}

func (t pollTransport) Close(code CloseCode, reason string) error {
	err := t.wsTransport.Close(code, reason)
	t.r.closed.Store(true)
	t.r.wake()
	return err
}

// A polled socket keeps the write workers' non-blocking writes.
var _ asyncTransport = pollTransport{}
