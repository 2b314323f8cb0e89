package channels

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/trace"
)

// Adaptive coalescing: a frame to an idle socket is written at once, alone;
// frames to a socket that wrote within the interval wait for the flush
// tick and then go out together in one write. The tick is driven by hand
// (the interval is an hour), so nothing depends on timing.
func TestCoalescingIdleAtOnceRecentWaitsForTick(t *testing.T) {
	ep := NewEndpoint(EndpointConfig{Tracer: trace.New(), WriteCoalesce: time.Hour})
	ep.Handle("room:*", newFuncHandler())
	s, mt := memSocket(t, ep, V2)
	mt.gate, mt.waiting = make(chan struct{}), make(chan int, 16)
	defer close(mt.gate)
	recv(t, s, `["3","3","room:lobby","phx_join",{}]`)
	if n := <-mt.waiting; n != 1 { // the join reply: the socket was idle
		t.Fatalf("join reply written in a batch of %d", n)
	}
	mt.gate <- struct{}{}
	mt.waitFrames(t, 1)
	waitWriterIdle(t, s)
	for i := 0; i < 3; i++ {
		if ep.Hub().Broadcast("room:lobby", "ev", json.RawMessage(`{}`), nil) != 1 {
			t.Fatal("broadcast not delivered")
		}
	}
	ep.sched.mu.Lock()
	delayed := len(ep.sched.delayed)
	ep.sched.mu.Unlock()
	if delayed != 1 {
		t.Fatalf("%d sockets wait for the tick, want the one that just wrote", delayed)
	}
	ep.sched.tick.Stop()
	ep.sched.flush()
	if n := <-mt.waiting; n != 3 {
		t.Fatalf("after the tick: a batch of %d frames, want the 3 that gathered", n)
	}
	mt.gate <- struct{}{}
	mt.waitFrames(t, 4)
}

// waitWriterIdle waits until the socket's writer has released (its queue
// drained).
func waitWriterIdle(t *testing.T, s *Socket) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		s.outMu.Lock()
		writing := s.writing
		s.outMu.Unlock()
		if !writing {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("writer never went idle")
		}
		time.Sleep(time.Millisecond) // polling a state, not ordering: the assertion does not depend on it
	}
}
