package channels

import (
	"context"
	"errors"
	"os"
	"sync/atomic"

	"go.uber.org/zap"
)

// enqueue appends f to the outbound queue without blocking. It returns false
// when the frame is dropped: the socket is closing, or the queue would exceed
// QueueSize frames or QueueBytes bytes, in which case the socket is closed as
// a slow consumer (CloseSlowConsumer), logged and counted once.
func (s *Socket) enqueue(f Frame) bool { return s.enqueueIn(f, false) }

// enqueueControl queues f in the control lane: replies the client waits on
// (heartbeat and push replies). The writer writes the control lane before
// the next chunk of bulk frames, so a reply never waits behind a backlog of
// pushes; it still counts against QueueSize and QueueBytes.
func (s *Socket) enqueueControl(f Frame) bool { return s.enqueueIn(f, true) }

func (s *Socket) enqueueIn(f Frame, control bool) bool {
	s.outMu.Lock()
	if s.closing {
		s.outMu.Unlock()
		s.ep.stats.queueDrops.Add(1)
		return false
	}
	cfg := &s.ep.cfg
	if len(s.queue)+len(s.ctrl) >= cfg.QueueSize || s.queueBytes+len(f.Data) > cfg.QueueBytes {
		s.cutSlowLocked("queue_full")
		return false
	}
	if len(s.queue) == 0 && len(s.ctrl) == 0 && s.replaying == nil {
		s.backlogSince = monoNow()
	}
	if control {
		s.ctrl = append(s.ctrl, f)
	} else {
		s.queue = append(s.queue, f)
		if f.replay != nil {
			s.replayMarks++
		}
	}
	s.queueBytes += len(f.Data)
	s.startWriterLocked()
	s.outMu.Unlock()
	return true
}

// cutSlowLocked closes the socket as a slow consumer (1013): its queue is
// full, its backlog is older than QueueMaxLag, or a write timed out. It is
// logged, traced ("socket.slow" with why) and counted once. Callers hold
// outMu; it releases it.
func (s *Socket) cutSlowLocked(why string) {
	queued, bytes := s.queuedLocked(), s.queueBytes
	s.requestCloseLocked(CloseSlowConsumer, CloseSlowConsumer.String())
	s.outMu.Unlock()
	s.ep.stats.queueDrops.Add(uint64(queued) + 1)
	s.ep.stats.slowConsumers.Add(1)
	s.ep.log.Warn("slow consumer disconnected", zap.String("socket", s.id), zap.String("why", why),
		zap.Int("queued_frames", queued), zap.Int("queued_bytes", bytes))
	s.ep.cfg.Tracer.Emit("socket.slow", "socket", s.id, "why", why)
}

// replayJob is a join's replay (JoinResult.Then) waiting in, or being
// written from, a socket's queue. Only the writer touches frames.
type replayJob struct {
	frames  []Frame
	dropped atomic.Bool // the channel ended: what is left is not written
}

// drop stops the writer from writing what is left of the replay.
func (j *replayJob) drop() { j.dropped.Store(true) }

// Replay chunks: the writer writes at most this many frames or bytes of a
// replay at once (at least one frame), so each write fits the transport's
// write timeout for any reader that keeps up.
const (
	replayChunkFrames = 64
	replayChunkBytes  = 256 << 10
)

// next takes the replay's next chunk; last reports that nothing follows it.
func (j *replayJob) next() (chunk []Frame, last bool) {
	if j.dropped.Load() {
		return nil, true
	}
	n, size := 0, 0
	for n < len(j.frames) && n < replayChunkFrames && (n == 0 || size+len(j.frames[n].Data) <= replayChunkBytes) {
		size += len(j.frames[n].Data)
		n++
	}
	chunk, j.frames = j.frames[:n:n], j.frames[n:]
	if len(j.frames) == 0 {
		j.frames = nil
		return chunk, true
	}
	return chunk, false
}

// enqueueReplay queues frames as one entry: the writer writes them, in
// chunks, when it reaches that entry, before anything queued after it. So
// the socket's frame order is the enqueue order, but a replay counts as one
// frame of no bytes against QueueSize and QueueBytes, and a reader that keeps
// up gets all of it: the replay is paced by the transport, not refused by
// the queue. Frames queued behind it do count, so a reader that stops
// mid-replay is still cut once they overflow. It returns nil when the socket
// is closing (or overflowing).
func (s *Socket) enqueueReplay(frames []Frame) *replayJob {
	j := &replayJob{frames: frames}
	if !s.enqueue(Frame{replay: j}) {
		s.ep.stats.queueDrops.Add(uint64(len(frames)))
		return nil
	}
	return j
}

// queuedLocked counts the frames queued or left in replays.
func (s *Socket) queuedLocked() int {
	n := len(s.queue) + len(s.ctrl) - s.replayMarks
	for _, f := range s.queue {
		if f.replay != nil {
			n += len(f.replay.frames)
		}
	}
	if s.replaying != nil {
		n += len(s.replaying.frames)
	}
	return n
}

// closeWith requests a close with code; queued frames are dropped and the
// writer goroutine closes the transport.
func (s *Socket) closeWith(code CloseCode, reason string) {
	s.outMu.Lock()
	if s.closing {
		s.outMu.Unlock()
		return
	}
	dropped := s.queuedLocked()
	s.requestCloseLocked(code, reason)
	s.outMu.Unlock()
	if dropped > 0 {
		s.ep.stats.queueDrops.Add(uint64(dropped))
	}
	s.ep.cfg.Tracer.Emit("socket.close", "socket", s.id, "code", int(code))
}

func (s *Socket) requestCloseLocked(code CloseCode, reason string) {
	s.closing = true
	s.closeCode, s.closeReason = code, reason
	clear(s.queue)
	clear(s.ctrl)
	s.queue, s.ctrl, s.queueBytes = nil, nil, 0
	s.replayMarks, s.replaying = 0, nil
	s.cancel()
	s.startWriterLocked()
}

// startWriterLocked gives the socket a writer unless it has one: a write
// worker of the endpoint's pool (writeSched) for an asyncTransport, else a
// goroutine of its own. A socket that wrote within the last coalescing
// interval waits for the next flush tick, so frames arriving meanwhile go
// out in the same write; an idle one is written at once. Callers hold
// outMu; it is never called after End saw closing set, so the WaitGroup is
// not added to while End waits.
func (s *Socket) startWriterLocked() {
	if s.writing {
		return
	}
	s.writing = true
	s.writers.Add(1)
	s.ep.sched.wake(s, s.closing, s.lastWrite)
}

// takeSpare returns the batch buffer kept from the last writer run.
func (s *Socket) takeSpare() []Frame {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	b := s.spare
	s.spare = nil
	return b
}

// maxIdleQueueCap bounds the queue capacity kept by an idle socket.
const maxIdleQueueCap = 16

// batchBytes bounds the bulk bytes the writer takes for one write, so a
// control frame queued during a backlog waits for at most one such write
// (32 KiB: a third of a second for a reader taking 100 KiB/s; for a reader
// that keeps up, a batch of hundreds of typical frames per syscall).
const batchBytes = 32 << 10

// writesPerTurn is how many writes a write worker makes for one socket
// before it serves the next ready socket (the socket goes to the back of
// the ready queue), so one busy socket does not hold a worker.
const writesPerTurn = 4

// writeLoop is the writer of a socket whose transport may block: a
// goroutine of its own, which runs until the queue is empty.
func (s *Socket) writeLoop() {
	batch := s.takeSpare()
	batch = s.runWriter(batch, false)
	if cap(batch) <= maxIdleQueueCap {
		s.outMu.Lock()
		if !s.writing && s.spare == nil {
			s.spare = batch[:0]
		}
		s.outMu.Unlock()
	}
}

// runWriter drains the queue until it is empty, then releases the writer
// (writing false); it performs the close when one was requested. Each write
// takes the control lane first, then bulk frames up to batchBytes, stopping
// at a replay entry (a replay is written in chunks, with the control lane
// written between chunks). Before each write outside a replay it cuts the
// socket (1013) when the backlog it is behind on is older than QueueMaxLag
// (frames queued behind a replay age from the replay's end).
//
// With async (a write worker, asyncTransport) it also returns, keeping the
// writer, after writesPerTurn writes (the socket is queued again) or when a
// write parks (asyncDone queues it again); the close handshake, which may
// block, runs on a goroutine of its own. batch is a reusable buffer; the
// (possibly grown) buffer is returned.
func (s *Socket) runWriter(batch []Frame, async bool) []Frame {
	for turn := 0; ; turn++ {
		s.outMu.Lock()
		if s.closing {
			if s.closeSent {
				s.writing = false
				s.outMu.Unlock()
				s.writers.Done()
				return batch
			}
			s.closeSent = true
			code, reason := s.closeCode, s.closeReason
			s.outMu.Unlock()
			if async {
				go func() {
					_ = s.t.Close(code, reason)
					s.runWriter(nil, false) // releases the writer
				}()
				return batch
			}
			_ = s.t.Close(code, reason)
			continue
		}
		if len(s.queue) == 0 && len(s.ctrl) == 0 && s.replaying == nil {
			s.writing = false
			if cap(s.queue) > maxIdleQueueCap {
				s.queue = nil
			}
			if cap(s.ctrl) > maxIdleQueueCap {
				s.ctrl = nil
			}
			s.outMu.Unlock()
			s.writers.Done()
			return batch
		}
		if async && turn >= writesPerTurn {
			s.outMu.Unlock()
			s.ep.sched.now(s)
			return batch
		}
		if lag := s.ep.cfg.QueueMaxLag; lag > 0 && s.replaying == nil && s.backlogSince != 0 && monoNow()-s.backlogSince > int64(lag) {
			s.cutSlowLocked("lag")
			continue
		}
		s.lastWrite = monoNow()
		batch = batch[:0]
		if len(s.ctrl) > 0 {
			batch = append(batch, s.ctrl...)
			for _, f := range s.ctrl {
				s.queueBytes -= len(f.Data)
			}
			clear(s.ctrl)
			s.ctrl = s.ctrl[:0]
		}
		if j := s.replaying; j != nil {
			if len(batch) == 0 { // replies go out before the next chunk
				chunk, last := j.next()
				if last {
					// Frames queued behind a replay start to age when it
					// ends: a replay is paced by the reader, not lag.
					s.replaying = nil
					s.backlogSince = monoNow()
				}
				batch = append(batch, chunk...)
			}
			s.outMu.Unlock()
			if len(batch) > 0 && s.write(batch, async) {
				clear(batch)
				return batch
			}
			clear(batch)
			continue
		}
		// n bulk frames go now: up to the first replay entry and batchBytes
		// (at least one frame).
		n, size := 0, 0
		for n < len(s.queue) {
			f := &s.queue[n]
			if f.replay != nil || (n > 0 && size+len(f.Data) > batchBytes) {
				break
			}
			size += len(f.Data)
			n++
		}
		switch {
		case n == 0 && len(s.queue) > 0 && len(batch) == 0: // a replay is next
			s.replaying = s.queue[0].replay
			s.replayMarks--
			s.queue[0] = Frame{}
			s.queue = s.queue[1:]
			s.outMu.Unlock()
			continue
		case n == 0:
		case n == len(s.queue) && len(batch) == 0 && !async:
			batch, s.queue = s.queue, batch[:0]
		default:
			batch = append(batch, s.queue[:n]...)
			rest := copy(s.queue, s.queue[n:])
			clear(s.queue[rest:])
			s.queue = s.queue[:rest]
		}
		s.queueBytes -= size
		if len(s.queue) == 0 && s.replaying == nil {
			s.backlogSince = 0
		}
		s.outMu.Unlock()
		parked := s.write(batch, async)
		clear(batch)
		if parked {
			return batch
		}
	}
}

// write writes frames: through the transport's Write (a socket of its own
// goroutine), or without blocking (async): it reports whether the write
// parked, in which case the writer is kept and asyncDone resumes it.
func (s *Socket) write(frames []Frame, async bool) (parked bool) {
	if !async {
		s.writeBatch(frames)
		return false
	}
	s.ep.stats.framesOut.Add(uint64(len(frames)))
	s.ep.stats.writes.Add(1)
	parked, err := s.aw.writeAsync(frames, s.asyncDone)
	if parked {
		s.ep.stats.writesParked.Add(1)
		s.ep.sched.park(s)
		return true
	}
	if err != nil {
		s.writeFailed(err)
	}
	return false
}

// asyncDone ends a parked write: its outcome is handled and the socket goes
// back to the write workers (the writer was kept while parked).
func (s *Socket) asyncDone(err error) {
	s.ep.sched.unpark(s)
	if err != nil {
		s.writeFailed(err)
	}
	s.ep.sched.now(s)
}

// writeBatch writes frames to the transport; a failed write closes the
// socket (writeFailed) and returns false.
func (s *Socket) writeBatch(frames []Frame) bool {
	// Not s.ctx: a close request must not abort the write in flight
	// (the close frame follows it). Transports bound writes themselves.
	err := s.t.Write(context.Background(), frames)
	s.ep.stats.framesOut.Add(uint64(len(frames)))
	if err != nil {
		s.writeFailed(err)
		return false
	}
	return true
}

// writeFailed closes the socket after a failed write: a write that timed
// out means the reader stopped taking bytes (1013, slow consumer), any
// other failure 1001.
func (s *Socket) writeFailed(err error) {
	s.ep.cfg.Tracer.Emit("socket.write_error", "socket", s.id, "err", err.Error())
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		s.outMu.Lock()
		if s.closing {
			s.outMu.Unlock()
		} else {
			s.cutSlowLocked("write_timeout")
		}
		return
	}
	s.closeWith(CloseGoingAway, "write failed")
}
