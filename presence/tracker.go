package presence

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"maps"
	"sync"
)

// TrackerConfig configures a Tracker.
type TrackerConfig struct {
	// OnDiff receives every presence_diff payload,
	//
	//	{"joins":{"<key>":{"metas":[…]}},"leaves":{"<key>":{"metas":[…]}}}
	//
	// with both joins and leaves always present. Calls are serialized, in
	// the order of the changes, so a topic's diffs arrive in order. OnDiff
	// is called with the Tracker's lock held: it must not block for long
	// and must not call the Tracker. diff is owned by the callee. Nil
	// discards diffs.
	OnDiff func(topic string, diff json.RawMessage)
}

// Tracker is a Phoenix-compatible presence for the channels of one node
// (docs/PHOENIX.md §5). It knows topics, keys and metas, not sockets: the
// channel layer tracks a member when its socket joins, untracks it when the
// socket leaves or dies, pushes List as presence_state after every join, and
// broadcasts each OnDiff payload as presence_diff.
//
// Every tracked meta gets an opaque phx_ref that stays the same until the
// meta is updated or untracked; List never mints new refs. Presence is
// node-local: members tracked on other nodes are not listed.
//
// All methods are safe for concurrent use.
type Tracker struct {
	cfg TrackerConfig

	mu     sync.Mutex
	topics map[string]*topicState
	prefix [6]byte
	next   uint64
}

type topicState struct {
	byRef map[string]*entry
	order []*entry // tracking order; List keeps it within a key
}

type entry struct {
	key  string
	ref  string
	meta map[string]any // includes phx_ref (and phx_ref_prev after an update)
}

// NewTracker returns an empty Tracker.
func NewTracker(cfg TrackerConfig) *Tracker {
	t := &Tracker{cfg: cfg, topics: make(map[string]*topicState)}
	_, _ = rand.Read(t.prefix[:])
	return t
}

// newRef returns a unique, URL-safe ref: 12 bytes (6 random per tracker,
// 6 of a counter), base64url without padding, 16 characters.
func (t *Tracker) newRef() string {
	t.next++
	var b [12]byte
	copy(b[:6], t.prefix[:])
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], t.next)
	copy(b[6:], n[2:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Track adds a meta for key on topic and returns its phx_ref. meta is copied
// (shallowly); its phx_ref and phx_ref_prev fields, if any, are replaced.
// The diff lists the meta as a join. meta must be JSON-encodable: Track
// panics, before changing anything, if it is not.
func (t *Tracker) Track(topic, key string, meta map[string]any) (ref string) {
	mustJSON(meta)
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.topics[topic]
	if ts == nil {
		ts = &topicState{byRef: make(map[string]*entry)}
		t.topics[topic] = ts
	}
	e := &entry{key: key, ref: t.newRef(), meta: maps.Clone(meta)}
	if e.meta == nil {
		e.meta = make(map[string]any, 1)
	}
	delete(e.meta, "phx_ref_prev")
	e.meta["phx_ref"] = e.ref
	ts.byRef[e.ref] = e
	ts.order = append(ts.order, e)
	t.emitLocked(topic, []*entry{e}, nil)
	return e.ref
}

// Untrack removes the meta with phx_ref ref from topic and reports whether
// it was there. The diff lists the meta, as it was, as a leave.
func (t *Tracker) Untrack(topic, ref string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.topics[topic]
	if ts == nil || ts.byRef[ref] == nil {
		return false
	}
	e := ts.byRef[ref]
	t.removeLocked(topic, ts, e)
	t.emitLocked(topic, nil, []*entry{e})
	return true
}

// Update replaces the meta with phx_ref ref on topic. The new meta gets a
// new phx_ref and phx_ref_prev = ref; one diff lists it as a join and the old
// meta as a leave of the same key, so clients keep the key. It returns the
// new ref, or false when ref is not tracked on topic. Like Track, it panics
// on a meta that is not JSON-encodable.
func (t *Tracker) Update(topic, ref string, meta map[string]any) (newRef string, ok bool) {
	mustJSON(meta)
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.topics[topic]
	if ts == nil || ts.byRef[ref] == nil {
		return "", false
	}
	old := ts.byRef[ref]
	e := &entry{key: old.key, ref: t.newRef(), meta: maps.Clone(meta)}
	if e.meta == nil {
		e.meta = make(map[string]any, 2)
	}
	e.meta["phx_ref"] = e.ref
	e.meta["phx_ref_prev"] = old.ref
	delete(ts.byRef, old.ref)
	ts.byRef[e.ref] = e
	for i, x := range ts.order {
		if x == old {
			ts.order[i] = e
			break
		}
	}
	t.emitLocked(topic, []*entry{e}, []*entry{old})
	return e.ref, true
}

// UntrackAll removes every meta of topic, as when the topic closes, and
// sends one diff with all of them as leaves. It returns how many there were.
func (t *Tracker) UntrackAll(topic string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.topics[topic]
	if ts == nil {
		return 0
	}
	delete(t.topics, topic)
	t.emitLocked(topic, nil, ts.order)
	return len(ts.order)
}

func (t *Tracker) removeLocked(topic string, ts *topicState, e *entry) {
	delete(ts.byRef, e.ref)
	for i, x := range ts.order {
		if x == e {
			ts.order = append(ts.order[:i], ts.order[i+1:]...)
			break
		}
	}
	if len(ts.order) == 0 {
		delete(t.topics, topic)
	}
}

// presences is the JSON shape of presence_state and of joins/leaves:
// {"<key>":{"metas":[meta, …]}}.
type presences map[string]presenceEntry

type presenceEntry struct {
	Metas []map[string]any `json:"metas"`
}

func group(es []*entry) presences {
	p := make(presences)
	for _, e := range es {
		pe := p[e.key]
		pe.Metas = append(pe.Metas, e.meta)
		p[e.key] = pe
	}
	return p
}

// List returns topic's presence_state payload: every tracked key with its
// metas in tracking order, {"<key>":{"metas":[{…,"phx_ref":"…"}]}}; {} when
// nobody is tracked.
func (t *Tracker) List(topic string) json.RawMessage {
	t.mu.Lock()
	defer t.mu.Unlock()
	var es []*entry
	if ts := t.topics[topic]; ts != nil {
		es = ts.order
	}
	return mustJSON(group(es))
}

// Size returns how many metas are tracked on topic.
func (t *Tracker) Size(topic string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ts := t.topics[topic]; ts != nil {
		return len(ts.order)
	}
	return 0
}

func (t *Tracker) emitLocked(topic string, joins, leaves []*entry) {
	if t.cfg.OnDiff == nil {
		return
	}
	t.cfg.OnDiff(topic, mustJSON(struct {
		Joins  presences `json:"joins"`
		Leaves presences `json:"leaves"`
	}{group(joins), group(leaves)}))
}

// mustJSON marshals v. Metas come from the application; a meta value that
// cannot be marshalled (a channel, a func) is a programming error.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("presence: meta is not JSON-encodable: " + err.Error())
	}
	return b
}
