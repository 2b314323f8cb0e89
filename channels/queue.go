package channels

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// enqueue appends f to the outbound queue without blocking. It returns false
// when the frame is dropped: the socket is closing, or the queue would exceed
// QueueSize frames or QueueBytes bytes, in which case the socket is closed as
// a slow consumer (CloseSlowConsumer), logged and counted once.
func (s *Socket) enqueue(f Frame) bool {
	s.outMu.Lock()
	if s.closing {
		s.outMu.Unlock()
		s.ep.stats.queueDrops.Add(1)
		return false
	}
	cfg := &s.ep.cfg
	if len(s.queue) >= cfg.QueueSize || s.queueBytes+len(f.Data) > cfg.QueueBytes {
		queued, bytes := len(s.queue), s.queueBytes
		s.requestCloseLocked(CloseSlowConsumer, CloseSlowConsumer.String())
		s.outMu.Unlock()
		s.ep.stats.queueDrops.Add(uint64(queued) + 1)
		s.ep.stats.slowConsumers.Add(1)
		s.ep.log.Warn("slow consumer disconnected", zap.String("socket", s.id),
			zap.Int("queued_frames", queued), zap.Int("queued_bytes", bytes))
		cfg.Tracer.Emit("socket.slow", "socket", s.id)
		return false
	}
	s.queue = append(s.queue, f)
	s.queueBytes += len(f.Data)
	s.startWriterLocked()
	s.outMu.Unlock()
	return true
}

// closeWith requests a close with code; queued frames are dropped and the
// writer goroutine closes the transport.
func (s *Socket) closeWith(code CloseCode, reason string) {
	s.outMu.Lock()
	if s.closing {
		s.outMu.Unlock()
		return
	}
	dropped := len(s.queue)
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
	s.queue, s.queueBytes = nil, 0
	s.cancel()
	s.startWriterLocked()
}

// startWriterLocked starts the writer goroutine unless one runs. Callers
// hold outMu; it is never called after End saw closing set, so the
// WaitGroup is not added to while End waits.
func (s *Socket) startWriterLocked() {
	if s.writing {
		return
	}
	s.writing = true
	s.writers.Add(1)
	go s.writeLoop()
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

// writeLoop drains the queue in batches (everything queued at the time)
// until it is empty, then exits; it performs the close when one was
// requested.
func (s *Socket) writeLoop() {
	defer s.writers.Done()
	if d := s.ep.cfg.WriteDelay; d > 0 {
		time.Sleep(d) // coalesce the burst that woke the writer
	}
	batch := s.takeSpare()
	for {
		s.outMu.Lock()
		if s.closing {
			if s.closeSent {
				s.writing = false
				s.outMu.Unlock()
				return
			}
			s.closeSent = true
			code, reason := s.closeCode, s.closeReason
			s.outMu.Unlock()
			_ = s.t.Close(code, reason)
			continue
		}
		if len(s.queue) == 0 {
			s.writing = false
			if cap(s.queue) > maxIdleQueueCap {
				s.queue = nil
			}
			if cap(batch) <= maxIdleQueueCap {
				s.spare = batch[:0]
			}
			s.outMu.Unlock()
			return
		}
		batch, s.queue = s.queue, batch[:0]
		s.queueBytes = 0
		s.outMu.Unlock()

		// Not s.ctx: a close request must not abort the write in flight
		// (the close frame follows it). Transports bound writes themselves.
		err := s.t.Write(context.Background(), batch)
		s.ep.stats.framesOut.Add(uint64(len(batch)))
		clear(batch)
		if err != nil {
			s.ep.cfg.Tracer.Emit("socket.write_error", "socket", s.id, "err", err.Error())
			s.closeWith(CloseGoingAway, "write failed")
		}
	}
}
