package channels

import (
	"runtime"
	"sync"
	"time"
)

// writeSched decides when and where an endpoint's sockets write.
//
// Sockets over an asyncTransport (WebSocket) are written by a bounded pool
// of write workers, at most GOMAXPROCS goroutines, that drain a queue of
// ready sockets: a fan-out to 10,000 sockets wakes a couple of workers, not
// 10,000 goroutines. A worker exits when the queue is empty, so an idle
// endpoint runs none. A worker never waits on a client: a write the kernel
// does not take whole is parked (connWriter.writeData): its rest goes out
// on a goroutine of its own, which exists only while that client is behind,
// and the socket returns to the queue when it is done. Parking on a
// goroutine, rather than re-arming a non-blocking write on the poller's
// readiness, keeps the rare slow path on Go's ordinary blocking write,
// costs nothing while clients keep up (the send buffer on loopback or a
// LAN rarely fills; TCP_NOTSENT_LOWAT bounds what it holds) and keeps the
// write of the rest, the control frames queued behind it and the close
// handshake in one place.
//
// No write carries a deadline: while writes are parked, a sweep every
// sweepEvery fails those parked for longer than WriteTimeout (or
// QueueMaxLag, when shorter)
// (connWriter.expireParked), which cuts the socket as a slow consumer.
//
// Adaptive coalescing: a socket that gets a frame while idle is written at
// once; one that wrote within the last coalescing interval waits for the
// next flush tick (at most one interval), so frames arriving meanwhile go
// out in the same write. WriteDelay, when set, delays every socket to the
// tick of its interval, as it did before (a fixed delay after idle).
//
// Sockets over other transports get a goroutine of their own per run of
// writes (their Write may block), scheduled the same way.
type writeSched struct {
	ep         *Endpoint
	interval   time.Duration // coalescing interval (0: none)
	always     bool          // delay idle sockets too (WriteDelay)
	maxWorkers int
	sweepEvery time.Duration

	mu      sync.Mutex
	ready   []*Socket // FIFO from head; guarded by mu
	head    int
	workers int                  // running workers; guarded by mu
	delayed []*Socket            // waiting for the flush tick; guarded by mu
	tick    *time.Timer          // armed while delayed is not empty
	parked  map[*Socket]struct{} // sockets with a parked write; guarded by mu
	// expireAfter is how long a write may stay parked: WriteTimeout, or
	// QueueMaxLag when that is shorter.
	expireAfter time.Duration
	sweepTimer  *time.Timer // armed while parked is not empty
}

func (q *writeSched) init(ep *Endpoint) {
	q.ep = ep
	q.interval, q.always = ep.cfg.WriteCoalesce, false
	if ep.cfg.WriteDelay > 0 {
		q.interval, q.always = ep.cfg.WriteDelay, true
	}
	q.maxWorkers = max(runtime.GOMAXPROCS(0), 1)
	q.expireAfter = ep.cfg.WriteTimeout
	if lag := ep.cfg.QueueMaxLag; lag > 0 && lag < q.expireAfter {
		// The frames of a parked write have waited at least as long as
		// it has: SOCKET_MAX_LAG bounds them as it bounds queued ones.
		q.expireAfter = lag
	}
	q.sweepEvery = min(max(q.expireAfter/8, 5*time.Millisecond), time.Second)
	q.parked = make(map[*Socket]struct{})
}

// wake schedules the writer of s, which just gained one: now when closing
// or idle (its last write, lastWrite in monoNow units, is an interval or
// more ago), else at the next flush tick. Callers hold s.outMu.
func (q *writeSched) wake(s *Socket, closing bool, lastWrite int64) {
	if !closing && q.interval > 0 && (q.always || (lastWrite != 0 && monoNow()-lastWrite < int64(q.interval))) {
		q.mu.Lock()
		q.delayed = append(q.delayed, s)
		if len(q.delayed) == 1 {
			if q.tick == nil {
				q.tick = time.AfterFunc(q.interval, q.flush)
			} else {
				q.tick.Reset(q.interval)
			}
		}
		q.mu.Unlock()
		return
	}
	q.now(s)
}

// flush runs on the tick: every delayed socket becomes ready.
func (q *writeSched) flush() {
	q.mu.Lock()
	d := q.delayed
	q.delayed = nil
	for i, s := range d {
		q.readyLocked(s)
		d[i] = nil
	}
	q.mu.Unlock()
}

// now makes s's writer run as soon as a worker (or its goroutine) can.
func (q *writeSched) now(s *Socket) {
	q.mu.Lock()
	q.readyLocked(s)
	q.mu.Unlock()
}

func (q *writeSched) readyLocked(s *Socket) {
	if s.aw == nil {
		go s.writeLoop()
		return
	}
	if q.head > 256 && q.head*2 > len(q.ready) {
		n := copy(q.ready, q.ready[q.head:])
		clear(q.ready[n:])
		q.ready, q.head = q.ready[:n], 0
	}
	q.ready = append(q.ready, s)
	if q.workers < q.maxWorkers {
		q.workers++
		go q.worker()
	}
}

// worker writes ready sockets until none is left.
func (q *writeSched) worker() {
	var batch []Frame
	for {
		q.mu.Lock()
		if q.head == len(q.ready) {
			clear(q.ready)
			q.ready, q.head = q.ready[:0], 0
			if cap(q.ready) > 4096 {
				q.ready = nil
			}
			q.workers--
			q.mu.Unlock()
			return
		}
		s := q.ready[q.head]
		q.ready[q.head] = nil
		q.head++
		q.mu.Unlock()
		batch = s.runWriter(batch, true)
		if cap(batch) > 1024 {
			batch = nil
		}
	}
}

// park records that s has a parked write, for the sweep, unless the write
// has already finished (asyncDone may run before park).
func (q *writeSched) park(s *Socket) {
	q.mu.Lock()
	if !s.aw.isParked() {
		q.mu.Unlock()
		return
	}
	q.parked[s] = struct{}{}
	if len(q.parked) == 1 {
		if q.sweepTimer == nil {
			q.sweepTimer = time.AfterFunc(q.sweepEvery, q.sweep)
		} else {
			q.sweepTimer.Reset(q.sweepEvery)
		}
	}
	q.mu.Unlock()
}

func (q *writeSched) unpark(s *Socket) {
	q.mu.Lock()
	delete(q.parked, s)
	q.mu.Unlock()
}

// sweep fails the writes parked for longer than expireAfter (WriteTimeout,
// or QueueMaxLag when shorter) and re-arms itself while writes are parked.
func (q *writeSched) sweep() {
	before := monoNow() - int64(q.expireAfter)
	q.mu.Lock()
	socks := make([]*Socket, 0, len(q.parked))
	for s := range q.parked {
		socks = append(socks, s)
	}
	q.mu.Unlock()
	for _, s := range socks {
		if s.aw.expireParked(before) {
			q.ep.cfg.Tracer.Emit("socket.write_expired", "socket", s.id)
		}
	}
	q.mu.Lock()
	if len(q.parked) > 0 {
		q.sweepTimer.Reset(q.sweepEvery)
	}
	q.mu.Unlock()
}
