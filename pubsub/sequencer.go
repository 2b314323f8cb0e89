package pubsub

import (
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/session"
)

// DefaultReorderWindow is SequencerConfig.Window's default.
const DefaultReorderWindow = 100 * time.Millisecond

// DefaultReorderMax is SequencerConfig.MaxHeld's default.
const DefaultReorderMax = 256

// SequencerConfig configures a Sequencer.
type SequencerConfig struct {
	// Window is how long an event that arrived ahead of a missing one
	// waits for it (the reorder window). When it runs out, the held
	// events go out in order and the client sees the gap as a seq jump
	// (README "Gaps"). Zero means DefaultReorderWindow; negative means no
	// wait (the gap shows at once).
	Window time.Duration
	// MaxHeld bounds the events held per topic; one more releases them
	// all at once. Zero means DefaultReorderMax.
	MaxHeld int
	// Metrics receives the Reorder* counters; nil counts on no registry.
	Metrics *Metrics
	// AfterFunc starts the window's timer; tests replace it to fire the
	// window by hand. Default time.AfterFunc.
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
}

// Sequencer puts every session event a node delivers to its sockets in
// order, whatever path it took (the origin's own publish, a router's
// delivery, a flood, both): it is the Local that PubSub delivers through.
// Per topic it keeps the last position it handed on, and
//
//   - drops an event at or before it (a copy that came by a second path,
//     or one that arrived after its window ran out);
//   - hands on an event that directly follows it (session.Contiguous: the
//     next seq in the epoch, or an epoch's first event whose Prev is at or
//     before it), then any held events that now follow;
//   - holds an event that arrives ahead of a missing one for at most
//     Window (and MaxHeld events); when the window runs out the held
//     events go out in order, and the gap is the client's to close with a
//     rejoin.
//
// The first event of a topic (no position known) is handed on at once
// unless Seed named a position before it. Broadcasts without a
// agent.Position meta (presence diffs) go straight through. Safe for
// concurrent use; a topic's events reach Local under that topic's lock, so
// in order.
type Sequencer struct {
	local  Local
	window time.Duration
	max    int
	m      *Metrics
	after  func(d time.Duration, f func()) (stop func() bool)

	mu     sync.Mutex
	topics map[string]*topicOrder
}

type topicOrder struct {
	mu    sync.Mutex
	last  agent.Position
	known bool // last is set
	// seeded: last came from Seed, no event was handed on since; a later
	// Seed may lower it.
	seeded bool
	held   []heldEvent
	stop   func() bool // the running window's timer, nil when none
	gone   bool        // forgotten: a late timer does nothing
}

type heldEvent struct {
	pos     agent.Position
	prev    *agent.Position
	event   string
	payload json.RawMessage
}

var _ Local = (*Sequencer)(nil)

// NewSequencer returns a Sequencer delivering to local.
func NewSequencer(local Local, cfg SequencerConfig) *Sequencer {
	if cfg.Window == 0 {
		cfg.Window = DefaultReorderWindow
	}
	if cfg.MaxHeld <= 0 {
		cfg.MaxHeld = DefaultReorderMax
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.AfterFunc == nil {
		cfg.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	return &Sequencer{local: local, window: cfg.Window, max: cfg.MaxHeld, m: cfg.Metrics,
		after: cfg.AfterFunc, topics: make(map[string]*topicOrder)}
}

func (s *Sequencer) topic(name string) *topicOrder {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.topics[name]
	if t == nil {
		t = &topicOrder{}
		s.topics[name] = t
	}
	return t
}

// Seed sets topic's last position to pos when the topic has none yet: a
// joiner's replay ended there, so the next event to hand on is the one
// after it. Several joiners seeding before any event came leave the
// lowest of their positions (none of them misses an event). It does
// nothing once an event was handed on.
func (s *Sequencer) Seed(topic string, pos agent.Position) {
	if pos.IsZero() {
		return
	}
	t := s.topic(topic)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.known || t.seeded && pos.Less(t.last) {
		t.last, t.known, t.seeded = pos, true, true
	}
}

// Forget drops topic's state (its last position and held events, which are
// not delivered): wire it to the hub's last-unsubscribe hook.
func (s *Sequencer) Forget(topic string) {
	s.mu.Lock()
	t := s.topics[topic]
	delete(s.topics, topic)
	s.mu.Unlock()
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gone = true
	if t.stop != nil {
		t.stop()
		t.stop = nil
	}
	t.held = nil
}

// Close forgets every topic and stops their windows' timers; held events
// are not delivered. Broadcasts after Close start afresh.
func (s *Sequencer) Close() {
	s.mu.Lock()
	topics := make([]string, 0, len(s.topics))
	for name := range s.topics {
		topics = append(topics, name)
	}
	s.mu.Unlock()
	for _, name := range topics {
		s.Forget(name)
	}
}

// Broadcast implements Local. It returns how many sockets took the event
// now: 0 for an event held or dropped.
func (s *Sequencer) Broadcast(topic, event string, payload json.RawMessage, meta any) int {
	pos, ok := meta.(agent.Position)
	if !ok {
		return s.local.Broadcast(topic, event, payload, meta)
	}
	t := s.topic(topic)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gone { // forgotten between topic() and the lock: start afresh
		t = s.topic(topic)
		t.mu.Lock()
		defer t.mu.Unlock()
	}
	switch {
	case t.known && !t.last.Less(pos):
		s.m.ReorderDropped.Inc()
		return 0
	case !t.known || session.Contiguous(t.last, agent.Event{Epoch: pos.Epoch, Seq: pos.Seq, Prev: prevOf(t.last, pos, payload)}):
		n := s.hand(t, topic, event, payload, pos)
		s.release(t, topic)
		return n
	}
	for _, h := range t.held {
		if h.pos == pos {
			s.m.ReorderDropped.Inc()
			return 0
		}
	}
	s.m.ReorderHeld.Inc()
	t.held = append(t.held, heldEvent{pos: pos, prev: prevOf(t.last, pos, payload), event: event, payload: payload})
	slices.SortFunc(t.held, func(a, b heldEvent) int {
		switch {
		case a.pos.Less(b.pos):
			return -1
		case b.pos.Less(a.pos):
			return 1
		}
		return 0
	})
	switch {
	case len(t.held) > s.max || s.window < 0:
		s.flush(t, topic)
	case t.stop == nil:
		t.stop = s.after(s.window, func() { s.expire(topic, t) })
	}
	return 0
}

// hand delivers one event and makes it the topic's last. t.mu is held.
func (s *Sequencer) hand(t *topicOrder, topic, event string, payload json.RawMessage, pos agent.Position) int {
	t.last, t.known, t.seeded = pos, true, false
	return s.local.Broadcast(topic, event, payload, pos)
}

// release hands on the held events that now follow the last one, and
// drops those at or before it. t.mu is held.
func (s *Sequencer) release(t *topicOrder, topic string) {
	i := 0
	for ; i < len(t.held); i++ {
		h := t.held[i]
		if !t.last.Less(h.pos) {
			s.m.ReorderDropped.Inc()
			continue
		}
		if !session.Contiguous(t.last, agent.Event{Epoch: h.pos.Epoch, Seq: h.pos.Seq, Prev: h.prev}) {
			break
		}
		s.hand(t, topic, h.event, h.payload, h.pos)
	}
	t.held = t.held[i:]
	if len(t.held) == 0 {
		t.held = nil
		if t.stop != nil {
			t.stop()
			t.stop = nil
		}
	}
}

// flush hands on every held event in order: the gap before the first is
// not coming in time. t.mu is held.
func (s *Sequencer) flush(t *topicOrder, topic string) {
	if len(t.held) > 0 {
		s.m.ReorderGaps.Inc()
	}
	held := t.held
	t.held = nil
	if t.stop != nil {
		t.stop()
		t.stop = nil
	}
	for _, h := range held {
		if t.last.Less(h.pos) {
			s.hand(t, topic, h.event, h.payload, h.pos)
		}
	}
}

// expire runs when t's window runs out.
func (s *Sequencer) expire(topic string, t *topicOrder) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gone {
		return
	}
	t.stop = nil
	s.flush(t, topic)
}

// prevOf reads an epoch's first event's Prev from its JSON payload, only
// when pos starts an epoch after last (the only case the order rule reads
// it).
func prevOf(last, pos agent.Position, payload json.RawMessage) *agent.Position {
	if pos.Epoch <= last.Epoch {
		return nil
	}
	var ev struct {
		Prev *agent.Position `json:"prev"`
	}
	if json.Unmarshal(payload, &ev) != nil {
		return nil
	}
	return ev.Prev
}
