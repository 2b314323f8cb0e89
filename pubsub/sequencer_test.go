package pubsub_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/pubsub"
)

// recLocal records what reaches the sockets.
type recLocal struct {
	mu  sync.Mutex
	got []string
}

func (r *recLocal) Broadcast(topic, event string, _ json.RawMessage, meta any) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := meta.(agent.Position); ok {
		r.got = append(r.got, p.String())
	} else {
		r.got = append(r.got, event)
	}
	return 1
}

func (r *recLocal) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.got
	r.got = nil
	return out
}

// manualTimers fires the reorder windows by hand.
type manualTimers struct {
	mu  sync.Mutex
	fns []func()
}

func (m *manualTimers) after(_ time.Duration, f func()) func() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := len(m.fns)
	m.fns = append(m.fns, f)
	return func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		live := m.fns[i] != nil
		m.fns[i] = nil
		return live
	}
}

// fire runs the windows still running; it reports how many.
func (m *manualTimers) fire() int {
	m.mu.Lock()
	var run []func()
	for i, f := range m.fns {
		if f != nil {
			run = append(run, f)
			m.fns[i] = nil
		}
	}
	m.mu.Unlock()
	for _, f := range run {
		f()
	}
	return len(run)
}

func newSeq(t *testing.T) (*pubsub.Sequencer, *recLocal, *manualTimers) {
	t.Helper()
	local, timers := &recLocal{}, &manualTimers{}
	return pubsub.NewSequencer(local, pubsub.SequencerConfig{Window: time.Second, MaxHeld: 4, AfterFunc: timers.after}), local, timers
}

func send(s *pubsub.Sequencer, epoch, seq int64, prev *agent.Position) {
	ev := agent.Event{Session: "s", Epoch: epoch, Seq: seq, Type: agent.TypeDelta, Data: json.RawMessage(`{}`), Prev: prev}
	b, _ := json.Marshal(ev)
	s.Broadcast("session:s", ev.Type, b, ev.Pos())
}

func want(t *testing.T, local *recLocal, w ...string) {
	t.Helper()
	if got := local.take(); !slices.Equal(got, w) {
		t.Fatalf("delivered %v, want %v", got, w)
	}
}

// A node hands its sockets a session's events in order, whatever order
// they arrive in, and each once: an event ahead of a missing one waits
// for it; a second copy, or one at or before the last handed on, is
// dropped.
func TestSequencerOrders(t *testing.T) {
	s, local, timers := newSeq(t)
	send(s, 1, 1, nil)
	want(t, local, "1-1")
	send(s, 1, 3, nil) // 1-2 is missing: held
	send(s, 1, 4, nil)
	want(t, local)
	send(s, 1, 3, nil) // a second copy of a held event
	send(s, 1, 2, nil)
	want(t, local, "1-2", "1-3", "1-4")
	send(s, 1, 2, nil) // a second copy after it went out
	send(s, 1, 4, nil)
	want(t, local)
	if n := timers.fire(); n != 0 {
		t.Fatalf("%d windows still running after the gap closed", n)
	}
}

// When the window runs out, the held events go out in order and the gap
// shows; the missing event, arriving later, is dropped (the client's
// rejoin replays it).
func TestSequencerWindowRunsOut(t *testing.T) {
	s, local, timers := newSeq(t)
	send(s, 1, 5, nil)
	send(s, 1, 8, nil)
	send(s, 1, 7, nil)
	want(t, local, "1-5")
	if timers.fire() != 1 {
		t.Fatal("no reorder window started")
	}
	want(t, local, "1-7", "1-8")
	send(s, 1, 6, nil)
	send(s, 1, 9, nil)
	want(t, local, "1-9")
}

// More than MaxHeld events held release them all at once.
func TestSequencerMaxHeld(t *testing.T) {
	s, local, _ := newSeq(t)
	send(s, 1, 1, nil)
	for seq := int64(3); seq <= 6; seq++ {
		send(s, 1, seq, nil)
	}
	want(t, local, "1-1")
	send(s, 1, 7, nil)
	want(t, local, "1-3", "1-4", "1-5", "1-6", "1-7")
}

// Across an epoch, the new epoch's first event follows the last one when
// its Prev is at or before it (the seq may step back); with Prev after it,
// the old epoch's tail is missing and the event waits.
func TestSequencerEpochs(t *testing.T) {
	p := func(e, s int64) *agent.Position { return &agent.Position{Epoch: e, Seq: s} }
	s, local, timers := newSeq(t)
	send(s, 1, 10, nil)
	send(s, 2, 9, p(1, 10)) // stepped back: follows 1-10
	want(t, local, "1-10", "2-9")
	send(s, 3, 12, p(2, 11)) // 2-10 and 2-11 missing
	want(t, local)
	send(s, 2, 10, nil)
	want(t, local, "2-10")
	send(s, 2, 11, nil)
	want(t, local, "2-11", "3-12")
	send(s, 4, 13, nil) // no Prev: the next seq follows
	want(t, local, "4-13")
	send(s, 5, 20, nil) // no Prev and a jump: waits, then goes out
	want(t, local)
	timers.fire()
	want(t, local, "5-20")
}

// Seed sets where a topic starts when nothing came yet; Forget drops the
// state and the held events; broadcasts without a position pass.
func TestSequencerSeedForget(t *testing.T) {
	s, local, timers := newSeq(t)
	s.Seed("session:s", agent.Position{Epoch: 1, Seq: 4})
	send(s, 1, 6, nil) // 1-5 missing after the seed
	send(s, 1, 4, nil) // at the seed
	want(t, local)
	s.Broadcast("session:s", "presence_diff", json.RawMessage(`{}`), nil)
	want(t, local, "presence_diff")
	send(s, 1, 5, nil)
	want(t, local, "1-5", "1-6")
	s.Seed("session:s", agent.Position{Epoch: 1, Seq: 3}) // an event went out since: ignored
	send(s, 1, 8, nil)
	s.Forget("session:s")
	if timers.fire() != 0 {
		t.Fatal("a forgotten topic's window still ran")
	}
	want(t, local)
	send(s, 1, 2, nil) // a fresh start
	want(t, local, "1-2")

	// Two joiners seed before any event comes: the lower position wins,
	// so neither misses an event.
	s.Forget("session:s")
	s.Seed("session:s", agent.Position{Epoch: 1, Seq: 60})
	s.Seed("session:s", agent.Position{Epoch: 1, Seq: 50})
	s.Seed("session:s", agent.Position{Epoch: 1, Seq: 55})
	send(s, 1, 51, nil)
	want(t, local, "1-51")
}

// Concurrent senders of one topic's events by several paths: every event
// reaches the sockets once, in order.
func TestSequencerConcurrentPaths(t *testing.T) {
	const n = 500
	local, timers := &recLocal{}, &manualTimers{}
	s := pubsub.NewSequencer(local, pubsub.SequencerConfig{Window: time.Second, MaxHeld: 2 * n, AfterFunc: timers.after})
	var wg sync.WaitGroup
	for path := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := int64(1); seq <= n; seq++ {
				if (seq+int64(path))%3 != 0 { // each path misses a third
					send(s, 1, seq, nil)
				}
			}
		}()
	}
	wg.Wait() // no window runs out meanwhile: the timers fire only by hand
	got := local.take()
	wantAll := make([]string, 0, n)
	for seq := 1; seq <= n; seq++ {
		wantAll = append(wantAll, fmt.Sprintf("1-%d", seq))
	}
	// The first event handed on may be any early one (no seed); from there
	// on the stream is strictly increasing and, every event being sent by
	// two paths, complete.
	if len(got) == 0 {
		t.Fatal("nothing delivered")
	}
	i := slices.Index(wantAll, got[0])
	if i < 0 || !slices.Equal(got, wantAll[i:]) {
		t.Fatalf("delivered %d events from %s, not the run %s..1-%d in order", len(got), got[0], got[0], n)
	}
}

// Close stops every running window; held events are not delivered.
func TestSequencerClose(t *testing.T) {
	s, local, timers := newSeq(t)
	send(s, 1, 1, nil)
	send(s, 1, 3, nil)
	s.Close()
	if timers.fire() != 0 {
		t.Fatal("a window still ran after Close")
	}
	want(t, local, "1-1")
}
