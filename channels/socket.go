package channels

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Socket is one client connection. Inbound frames are handled one at a time,
// in arrival order, on the reading goroutine (Receive); outbound frames go
// through a bounded queue drained by a single writer goroutine that exists
// only while there is something to write. A join's replay takes one entry of
// the queue, whatever its size: the writer paces it out in chunks at that
// place (see Socket.enqueueReplay).
//
// Lock order: Socket.chMu → Channel locks (see Hub) → Socket.outMu.
type Socket struct {
	id      string
	ep      *Endpoint
	t       Transport
	aw      asyncTransport // t, when its writes never block (write workers serve it)
	ser     Serializer
	serIdx  int
	assigns any

	ctx    context.Context // handler context; canceled when the socket closes
	cancel context.CancelFunc

	chMu     sync.Mutex
	channels []*Channel // joined channels, one per topic (mostly one or two: a slice holds one in 8 B, a map entry took 208 B); guarded by chMu

	outMu        sync.Mutex
	queue        []Frame    // bulk lane; guarded by outMu
	ctrl         []Frame    // control lane, written first; guarded by outMu
	backlogSince int64      // monoNow when the writer last fell behind (0: caught up); guarded by outMu
	replayMarks  int        // replay entries in queue; guarded by outMu
	replaying    *replayJob // the replay the writer is writing; guarded by outMu
	spare        []Frame    // the writer's batch buffer between runs (small only)
	queueBytes   int
	writing      bool // a writer goroutine runs
	closing      bool // no more frames are accepted
	closeCode    CloseCode
	closeReason  string
	closeSent    bool
	lastWrite    int64 // monoNow of the writer's last write (0: none); guarded by outMu
	writers      sync.WaitGroup

	lastIn atomic.Int64 // monotonic ns of the last inbound frame (heartbeat timeout: Endpoint.sweep)
	ended  atomic.Bool
}

// monoStart anchors monotonic timestamps.
var monoStart = time.Now()

func monoNow() int64 { return int64(time.Since(monoStart)) }

// ID returns the socket's endpoint-unique id (for Endpoint.Disconnect).
func (s *Socket) ID() string { return s.id }

// Assigns returns what the Connect hook returned.
func (s *Socket) Assigns() any { return s.assigns }

// Serializer returns the socket's negotiated serializer.
func (s *Socket) Serializer() Serializer { return s.ser }

// Context returns a context that is canceled when the socket starts closing.
func (s *Socket) Context() context.Context { return s.ctx }

// Close asks the socket to close with code; queued frames are dropped and the
// writer goroutine performs the close. It never blocks. Only the first close
// request counts.
func (s *Socket) Close(code CloseCode) { s.closeWith(code, code.String()) }

// Receive handles one inbound frame. The reading side calls it sequentially,
// never concurrently. It returns an error when the socket must stop reading:
// ErrSocketClosed after a close request, or the decode error of a malformed
// frame (the socket then closes with CloseMalformed or CloseUnsupportedData).
func (s *Socket) Receive(f Frame) error {
	s.lastIn.Store(monoNow())
	st := &s.ep.stats
	st.framesIn.Add(1)
	if s.isClosing() {
		return ErrSocketClosed
	}
	m, err := s.ser.Decode(f)
	if err != nil {
		st.badFrames.Add(1)
		code := CloseMalformed
		if errors.Is(err, ErrBinaryUnsupported) {
			code = CloseUnsupportedData
		}
		s.ep.cfg.Tracer.Emit("socket.bad_frame", "socket", s.id, "err", err.Error())
		s.Close(code)
		return err
	}
	s.dispatch(&m)
	return nil
}

// End tears the socket down after its reading side stopped: it closes the
// transport if nobody did yet, ends every channel (Terminate with
// ReasonSocketClosed), waits for the writer goroutine and unregisters the
// socket. The reading side calls it exactly once.
func (s *Socket) End() {
	if s.ended.Swap(true) {
		return
	}
	s.closeWith(CloseGoingAway, CloseGoingAway.String())
	s.chMu.Lock()
	chans := s.channels
	s.channels = nil
	s.chMu.Unlock()
	for _, ch := range chans {
		ch.end(ReasonSocketClosed, "")
	}
	s.writers.Wait()
	s.cancel()
	s.ep.detach(s)
	s.ep.cfg.Tracer.Emit("socket.end", "socket", s.id)
}

func (s *Socket) isClosing() bool {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	return s.closing
}

// onIdle declares the socket dead: the heartbeat sweep found that it
// received nothing for HeartbeatTimeout. It closes the socket with 1001
// (trace point "socket.idle"); a socket already closing or ended is left
// alone.
func (s *Socket) onIdle() {
	if s.ended.Load() || s.isClosing() {
		return
	}
	s.ep.cfg.Tracer.Emit("socket.idle", "socket", s.id)
	s.closeWith(CloseGoingAway, "idle timeout")
	s.declaredDead()
}

// declaredDead ends the socket's channels (Terminate with
// ReasonSocketClosed: presences leave) as soon as the socket is declared
// dead, without waiting for the close handshake that a silent client never
// answers; End later finds them ended. The channel list is left in place,
// so a join that completes meanwhile is still ended by End.
func (s *Socket) declaredDead() {
	s.chMu.Lock()
	chans := slices.Clone(s.channels)
	s.chMu.Unlock()
	for _, ch := range chans {
		ch.end(ReasonSocketClosed, "")
	}
	s.ep.cfg.Tracer.Emit("socket.dead", "socket", s.id, "channels", len(chans))
}

// channel returns the channel joined on topic, or nil.
func (s *Socket) channel(topic string) *Channel {
	s.chMu.Lock()
	defer s.chMu.Unlock()
	for _, ch := range s.channels {
		if ch.topic == topic {
			return ch
		}
	}
	return nil
}

// setChannel records ch as the channel of its topic, replacing the one
// there; after End it does nothing (End has taken the channels).
func (s *Socket) setChannel(ch *Channel) {
	s.chMu.Lock()
	defer s.chMu.Unlock()
	if s.ended.Load() {
		return
	}
	for i, old := range s.channels {
		if old.topic == ch.topic {
			s.channels[i] = ch
			return
		}
	}
	s.channels = append(s.channels, ch)
}

// forget removes ch from the socket's channels if it is still there.
func (s *Socket) forget(ch *Channel) bool {
	s.chMu.Lock()
	defer s.chMu.Unlock()
	for i, c := range s.channels {
		if c == ch {
			last := len(s.channels) - 1
			s.channels[i] = s.channels[last]
			s.channels[last] = nil
			s.channels = s.channels[:last]
			return true
		}
	}
	return false
}

func (s *Socket) channelCount() int {
	s.chMu.Lock()
	defer s.chMu.Unlock()
	return len(s.channels)
}
