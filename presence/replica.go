package presence

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/relaygw/relay/internal/trace"
	"github.com/relaygw/relay/muster"
)

// ReplicaConfig configures a Replica.
type ReplicaConfig struct {
	// Transport carries the Replica's messages: a scope of its own (not
	// Census's or Muster's). The Replica registers on it, starts it in
	// Start and closes it in Stop. Required.
	Transport muster.Transport
	// Incarnation returns this node's current incarnation, the one its
	// presences are stamped with: Census.Incarnation, so that when peers
	// declare this node dead and it takes a new incarnation, its presences
	// come back under the new one. Required.
	Incarnation func() uint64
	// Peers returns the peers whose presences are accepted, each with the
	// one incarnation accepted: Census.Peers. Presences of any other node or
	// incarnation are ignored. Required. Wire Census's OnPeer to
	// Replica.PeerUp and Replica.PeerDown.
	Peers func() map[string]uint64
	// BroadcastPeriod is how often changes are sent: the local ones to the
	// other nodes (one delta message per period), and the merged ones to
	// the topic's subscribers (one presence_diff per topic per period).
	// Zero means 1.5 s (Phoenix.Presence's broadcast period).
	BroadcastPeriod time.Duration
	// DigestInterval is how often this node broadcasts its clock per topic,
	// so that a peer that lost a delta (a partition shorter than the
	// failure detector's bound) asks for the state. Zero means 5 s.
	DigestInterval time.Duration
	// MaxListed is the most presences a topic lists. Above it, the topic's
	// subscribers get presence_state {} and then presence_count
	// {"count":N} (N: presences in the topic, cluster-wide) each period the
	// count changed, instead of diffs. Zero means 1000; negative means no
	// limit.
	MaxListed int
	// OnBroadcast receives what goes to a topic's subscribers: event
	// "presence_diff" {"joins":{…},"leaves":{…}}, "presence_state" {…} (on
	// a switch between listing and counting) or "presence_count"
	// {"count":N}. It is called from the flush, without the Replica's lock,
	// a topic's calls in order. Nil discards them.
	OnBroadcast func(topic, event string, payload json.RawMessage)
	// Logger; nil means zap.NewNop().
	Logger *zap.Logger
	// Tracer receives the trace points listed on Replica. Nil is free.
	Tracer *trace.Tracer
}

// Replica is cluster-wide Phoenix Presence (docs/PHOENIX.md §5.4).
//
// Every node tracks the presences of its own sockets (Track, Untrack) and
// keeps a replica of every other node's, per node and per topic, each
// stamped with the node's incarnation and a clock. A node's presences are
// written only by that node: a change reaches the others as a delta (from
// clock p to clock c of that topic), a lost delta is noticed on the next
// delta (its p does not match) or digest (its clock is ahead) and repaired
// by asking the node for its state of the topic, and a departed incarnation
// (Census: bye, silence past the peer timeout, or a restart) has all its
// presences dropped at once. So a leave is never lost to a concurrent join
// elsewhere, and a dead node leaves no ghost.
//
// Subscribers get Phoenix's payloads: List is the presence_state of a join,
// and changes go out once per BroadcastPeriod as one presence_diff per
// topic (netted by phx_ref: a presence that joined and left within the
// period is not sent, unless a socket that joined in between was served a
// state listing it: then its leave is; see pending). A topic above
// MaxListed presences is counted, not listed (ReplicaConfig.MaxListed).
//
// Trace points: presence.flushed (node, messages, broadcasts);
// presence.applied (node, from, kind, topics); presence.ignored (node, from,
// kind, reason: "peer", "dead"); presence.gap (node, from, topic);
// presence.dropped (node, peer, inc, presences).
//
// All methods are safe for concurrent use.
type Replica struct {
	cfg  ReplicaConfig
	tr   muster.Transport
	self string
	log  *zap.Logger
	tc   *trace.Tracer

	flushMu sync.Mutex // one Flush at a time, so a topic's broadcasts stay in order

	mu      sync.Mutex
	clock   uint64 // this node's clock: one tick per local change
	topics  map[string]*repTopicState
	dead    map[string]uint64         // highest departed incarnation, per peer
	parts   map[string]*stateAssembly // state transfers in progress, by origin + "\x00" + topic
	refs    *refSource                // phx_refs of local presences
	seq     uint64                    // receive order, for a stable List
	started bool
	stopped bool

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// rentry is one presence.
type rentry struct {
	key  string
	ref  string
	meta json.RawMessage // a JSON object with "phx_ref": ref
	seq  uint64          // order of arrival on this node
}

// record is one peer incarnation's presences in one topic, at a clock.
type record struct {
	inc     uint64
	clock   uint64
	entries map[string]*rentry
}

// repTopicState is everything known of one topic.
type repTopicState struct {
	local  map[string]*rentry // this node's presences, by ref
	lclock uint64             // clock of the latest local change (0: none since the topic emptied)
	sent   uint64             // clock of the latest delta sent: the next delta's p
	ljoins map[string]*rentry // local changes since the last delta
	lleavs map[string]*rentry
	dirty  bool

	remote map[string]*record // by peer name

	// Changes subscribers have not been told yet, by phx_ref. A socket
	// that joined since the last flush was served a state (List) that
	// already reflects some of them, so they are not simply netted: see
	// pending.
	pend map[string]*pending
	// What a served state showed since the last flush: a list, or counts.
	servedList, servedCount bool

	counts bool // subscribers were last told counts, not a list
	told   int  // the count last told, when counts
}

// pending is one presence's changes since the last flush, as its topic's
// subscribers must be told them at the next one. Two kinds of subscriber
// exist at a flush: those that were told everything up to the previous
// flush (they show base), and those that joined since and were served a
// state, each showing the presence as it was then (seenIn, seenOut). The
// diff must bring every one of them to now; phoenix.js applies a diff's
// joins before its leaves, ignores a leave of a phx_ref it does not show
// and a join of one it does, so:
//
//   - present now, absent from some view (base or a served state): a join;
//   - absent now, present in some view: a leave;
//   - otherwise nothing (a join and leave within the period that no served
//     state listed is netted away, as Phoenix.Presence does).
//
// Netting on the fly (a leave cancelling a pending join) is what left a
// phantom: a socket served a state that listed the pending join never
// heard of the leave.
type pending struct {
	e       *rentry // the presence as it joined, or as it left
	base    bool    // present at the last flush
	now     bool    // present now
	seenIn  bool    // a state served since the last flush listed it
	seenOut bool    // a state served since the last flush did not
}

type stateAssembly struct {
	inc, clock uint64
	got        []bool
	entries    []repEntry
	n          int
}

// NewReplica returns a Replica that is not started.
func NewReplica(cfg ReplicaConfig) *Replica {
	if cfg.BroadcastPeriod <= 0 {
		cfg.BroadcastPeriod = 1500 * time.Millisecond
	}
	if cfg.DigestInterval <= 0 {
		cfg.DigestInterval = 5 * time.Second
	}
	if cfg.MaxListed == 0 {
		cfg.MaxListed = 1000
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	r := &Replica{
		cfg:    cfg,
		tr:     cfg.Transport,
		log:    cfg.Logger,
		tc:     cfg.Tracer,
		topics: make(map[string]*repTopicState),
		dead:   make(map[string]uint64),
		parts:  make(map[string]*stateAssembly),
		refs:   newRefSource(),
	}
	if r.tr != nil {
		r.self = r.tr.Self()
	}
	return r
}

// Start registers on the transport, starts it, asks every peer for its
// state and starts the broadcast and digest timers. ctx bounds the start
// only; Stop ends the Replica.
func (r *Replica) Start(ctx context.Context) error {
	if r.tr == nil || r.cfg.Incarnation == nil || r.cfg.Peers == nil {
		return ErrNoTransport
	}
	r.mu.Lock()
	if r.started || r.stopped {
		r.mu.Unlock()
		return ErrStarted
	}
	r.started = true
	r.mu.Unlock()
	r.tr.Register(repHandler{r})
	if err := r.tr.Start(ctx); err != nil {
		return fmt.Errorf("presence: start replica: %w", err)
	}
	for peer, inc := range r.cfg.Peers() {
		r.PeerUp(peer, inc)
	}
	lctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(1)
	go r.loop(lctx)
	return nil
}

// Stop sends the pending changes, stops the timers and closes the
// transport. Peers drop this node's presences when Census tells them it
// left.
func (r *Replica) Stop() {
	r.mu.Lock()
	if r.stopped || !r.started {
		r.stopped = true
		r.mu.Unlock()
		return
	}
	r.stopped = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	r.Flush()
	_ = r.tr.Close()
}

func (r *Replica) loop(ctx context.Context) {
	defer r.wg.Done()
	bt := time.NewTicker(r.cfg.BroadcastPeriod)
	defer bt.Stop()
	dt := time.NewTicker(r.cfg.DigestInterval)
	defer dt.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-bt.C:
			r.Flush()
		case <-dt.C:
			r.Flush() // a digest never lists a change no delta carried yet
			r.SendDigest()
		}
	}
}

func (r *Replica) topic(name string) *repTopicState {
	ts := r.topics[name]
	if ts == nil {
		ts = &repTopicState{local: map[string]*rentry{}, remote: map[string]*record{}}
		r.topics[name] = ts
	}
	return ts
}

// Track adds a presence of this node for key on topic and returns its
// phx_ref. meta is copied; its phx_ref field is set (phx_ref_prev
// removed). It panics, before changing anything, on a meta that is not
// JSON-encodable. The join reaches subscribers and peers at the next flush.
func (r *Replica) Track(topic, key string, meta map[string]any) string {
	m := maps.Clone(meta)
	if m == nil {
		m = make(map[string]any, 1)
	}
	delete(m, "phx_ref_prev")
	r.mu.Lock()
	defer r.mu.Unlock()
	ref := r.refs.next()
	m["phx_ref"] = ref
	e := &rentry{key: key, ref: ref, meta: mustJSON(m)}
	r.seq++
	e.seq = r.seq
	ts := r.topic(topic)
	r.clock++
	ts.local[ref] = e
	ts.lclock = r.clock
	ts.dirty = true
	net(ts.ljoins, ts.lleavs, e, true, &ts.ljoins, &ts.lleavs)
	ts.changeLocked(e, true)
	return ref
}

// Untrack removes this node's presence ref from topic. It reports whether
// ref was tracked there.
func (r *Replica) Untrack(topic, ref string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ts := r.topics[topic]
	if ts == nil || ts.local[ref] == nil {
		return false
	}
	e := ts.local[ref]
	delete(ts.local, ref)
	r.clock++
	ts.lclock = r.clock
	ts.dirty = true
	net(ts.ljoins, ts.lleavs, e, false, &ts.ljoins, &ts.lleavs)
	ts.changeLocked(e, false)
	return true
}

// changeLocked records for the subscribers that e joined (join true) or
// left.
func (ts *repTopicState) changeLocked(e *rentry, join bool) {
	p := ts.pend[e.ref]
	if p == nil {
		if ts.pend == nil {
			ts.pend = map[string]*pending{}
		}
		p = &pending{base: !join}
		ts.pend[e.ref] = p
	}
	p.e, p.now = e, join
	if p.now == p.base && !p.seenIn && !p.seenOut {
		delete(ts.pend, e.ref) // back where every subscriber has it
	}
}

// servedLocked records that a state of ts was served now: listed (a
// presence_state with the presences) or counted.
func (ts *repTopicState) servedLocked(counted bool) {
	if counted {
		ts.servedCount = true
		return
	}
	ts.servedList = true
	for _, p := range ts.pend {
		if p.now {
			p.seenIn = true
		} else {
			p.seenOut = true
		}
	}
}

// net records e as joined (join true) or left in a pending pair of sets: a
// join cancels a pending leave of the same ref and the other way round.
// Peers' deltas are netted so; subscribers' changes are not (pending).
func net(joins, leaves map[string]*rentry, e *rentry, join bool, jp, lp *map[string]*rentry) {
	if join {
		if leaves[e.ref] != nil {
			delete(leaves, e.ref)
			return
		}
		if joins == nil {
			joins = map[string]*rentry{}
			*jp = joins
		}
		joins[e.ref] = e
		return
	}
	if joins[e.ref] != nil {
		delete(joins, e.ref)
		return
	}
	if leaves == nil {
		leaves = map[string]*rentry{}
		*lp = leaves
	}
	leaves[e.ref] = e
}

// sizeLocked is the number of presences of ts, cluster-wide.
func (ts *repTopicState) sizeLocked() int {
	n := len(ts.local)
	for _, rec := range ts.remote {
		n += len(rec.entries)
	}
	return n
}

// Count returns the number of presences in topic, cluster-wide (as far as
// this node knows).
func (r *Replica) Count(topic string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ts := r.topics[topic]; ts != nil {
		return ts.sizeLocked()
	}
	return 0
}

// Local returns the number of this node's presences in topic.
func (r *Replica) Local(topic string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ts := r.topics[topic]; ts != nil {
		return len(ts.local)
	}
	return 0
}

// List returns topic's presence_state payload, cluster-wide:
// {"<key>":{"metas":[…]}}, metas in order of arrival on this node; {} when
// the topic is empty or above MaxListed (then Count is what subscribers
// are told, as presence_count {"count":N}). counted reports the latter.
//
// List is the state served to a socket that joins the topic, and it
// includes the changes not yet broadcast (a socket sees itself at once).
// The caller subscribes the socket to the topic's broadcasts before it
// calls List; the next flush then tells that socket every change since,
// including the leave of a presence List showed while its join was still
// pending (see pending).
func (r *Replica) List(topic string) (state json.RawMessage, counted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ts := r.topics[topic]
	if ts == nil {
		return json.RawMessage("{}"), false
	}
	if r.overLocked(ts) {
		ts.servedLocked(true)
		return json.RawMessage("{}"), true
	}
	ts.servedLocked(false)
	var es []*rentry
	for _, e := range ts.local {
		es = append(es, e)
	}
	for _, rec := range ts.remote {
		for _, e := range rec.entries {
			es = append(es, e)
		}
	}
	return groupEntries(es), false
}

func (r *Replica) overLocked(ts *repTopicState) bool {
	return r.cfg.MaxListed >= 0 && ts.sizeLocked() > r.cfg.MaxListed
}

// groupEntries encodes es as {"<key>":{"metas":[…]}}, in seq order.
func groupEntries(es []*rentry) json.RawMessage {
	slices.SortFunc(es, func(a, b *rentry) int { return cmp.Compare(a.seq, b.seq) })
	p := make(map[string]struct {
		Metas []json.RawMessage `json:"metas"`
	}, len(es))
	for _, e := range es {
		pe := p[e.key]
		pe.Metas = append(pe.Metas, e.meta)
		p[e.key] = pe
	}
	return mustJSON(p)
}

// CountPayload is the presence_count payload for n presences.
func CountPayload(n int) json.RawMessage { return mustJSON(map[string]int{"count": n}) }

type clientOut struct {
	topic, event string
	payload      json.RawMessage
}

// Flush sends what changed since the last flush: one delta to the peers
// with this node's changes, and to each changed topic's subscribers a
// presence_diff (or, above MaxListed, presence_count; on a switch between
// the two, presence_state). The broadcast timer calls it every
// BroadcastPeriod. Calls are serialized.
func (r *Replica) Flush() {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.mu.Lock()
	inc := r.cfg.Incarnation()
	var delta []repTopic
	var big []string // topics with more changes than one message carries: sent as state
	var outs []clientOut
	for name, ts := range r.topics {
		if ts.dirty {
			if len(ts.ljoins)+len(ts.lleavs) > stateChunk {
				big = append(big, name)
			} else {
				rt := repTopic{Topic: name, Prev: ts.sent, Clock: ts.lclock}
				for _, e := range sortedEntries(ts.ljoins) {
					rt.Joins = append(rt.Joins, repEntry{Key: e.key, Ref: e.ref, Meta: e.meta})
				}
				for _, e := range sortedEntries(ts.lleavs) {
					rt.Leaves = append(rt.Leaves, e.ref)
				}
				delta = append(delta, rt)
			}
			ts.ljoins, ts.lleavs, ts.dirty = nil, nil, false
			ts.sent = ts.lclock
		}
		outs = r.clientOutLocked(name, ts, outs)
	}
	slices.Sort(big)
	msgs := r.stateMsgsLocked(inc, big)
	for name, ts := range r.topics {
		if len(ts.local) == 0 && ts.sent != 0 {
			// Peers drop an emptied record, so the next delta starts at 0.
			ts.sent, ts.lclock = 0, 0
		}
		if len(ts.local) == 0 && len(ts.remote) == 0 && !ts.dirty && len(ts.pend) == 0 {
			delete(r.topics, name)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(delta, func(a, b repTopic) int { return cmp.Compare(a.Topic, b.Topic) })
	for len(delta) > 0 {
		// At most stateChunk changes per message (a topic counts at least 1).
		n, k := 0, 0
		for k < len(delta) && (k == 0 || n+len(delta[k].Joins)+len(delta[k].Leaves) <= stateChunk) {
			n += max(1, len(delta[k].Joins)+len(delta[k].Leaves))
			k++
		}
		msgs = append(msgs, &repMsg{Kind: repDelta, Inc: inc, Topics: delta[:k]})
		delta = delta[k:]
	}
	for _, m := range msgs {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := r.tr.Broadcast(ctx, encodeRep(m)); err != nil {
			r.log.Debug("presence: delta not sent", zap.String("kind", m.Kind), zap.Error(err))
		}
		cancel()
	}
	if r.cfg.OnBroadcast != nil {
		for _, o := range outs {
			r.cfg.OnBroadcast(o.topic, o.event, o.payload)
		}
	}
	r.tc.Emit("presence.flushed", "node", r.self, "messages", len(msgs), "broadcasts", len(outs))
}

// clientOutLocked appends what ts's subscribers must be told and clears
// ts's pending changes. A state served since the last flush counts as a
// view to correct: a socket served a list while the others count is told
// presence_state {} and the count, one served a count while the others
// list is told the full presence_state, and one served a count is told the
// count even when it equals the one the others were last told.
func (r *Replica) clientOutLocked(name string, ts *repTopicState, outs []clientOut) []clientOut {
	over := r.overLocked(ts)
	switch {
	case over && (!ts.counts || ts.servedList):
		ts.counts, ts.told = true, ts.sizeLocked()
		outs = append(outs, clientOut{name, "presence_state", json.RawMessage("{}")},
			clientOut{name, "presence_count", CountPayload(ts.told)})
	case over:
		if n := ts.sizeLocked(); n != ts.told || ts.servedCount {
			ts.told = n
			outs = append(outs, clientOut{name, "presence_count", CountPayload(n)})
		}
	case ts.counts || ts.servedCount:
		ts.counts = false
		var es []*rentry
		for _, e := range ts.local {
			es = append(es, e)
		}
		for _, rec := range ts.remote {
			for _, e := range rec.entries {
				es = append(es, e)
			}
		}
		outs = append(outs, clientOut{name, "presence_state", groupEntries(es)})
	default:
		var joins, leaves []*rentry
		for _, p := range ts.pend {
			switch {
			case p.now && (!p.base || p.seenOut):
				joins = append(joins, p.e)
			case !p.now && (p.base || p.seenIn):
				leaves = append(leaves, p.e)
			}
		}
		if len(joins)+len(leaves) > 0 {
			outs = append(outs, clientOut{name, "presence_diff", diffPayload(joins, leaves)})
		}
	}
	ts.pend, ts.servedList, ts.servedCount = nil, false, false
	return outs
}

func sortedEntries(m map[string]*rentry) []*rentry {
	es := slices.Collect(maps.Values(m))
	slices.SortFunc(es, func(a, b *rentry) int { return cmp.Compare(a.seq, b.seq) })
	return es
}

// diffPayload is a presence_diff: {"joins":{…},"leaves":{…}}, both always
// present.
func diffPayload(joins, leaves []*rentry) json.RawMessage {
	return mustJSON(struct {
		Joins  json.RawMessage `json:"joins"`
		Leaves json.RawMessage `json:"leaves"`
	}{groupEntries(joins), groupEntries(leaves)})
}

// SendDigest broadcasts this node's clock and the clock of every topic
// with local presences. The digest timer calls it every DigestInterval.
func (r *Replica) SendDigest() {
	r.mu.Lock()
	m := &repMsg{Kind: repDigest, Inc: r.cfg.Incarnation(), Clock: r.clock, Digest: map[string]uint64{}}
	for name, ts := range r.topics {
		// A topic with unsent changes is listed at its last sent clock, so
		// no peer asks for a state the next delta brings anyway.
		if c := ts.sent; c > 0 && len(ts.local)+len(ts.lleavs) > 0 {
			m.Digest[name] = c
		}
	}
	r.mu.Unlock()
	if m.Clock == 0 {
		return // nothing was ever tracked here
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := r.tr.Broadcast(ctx, encodeRep(m)); err != nil {
		r.log.Debug("presence: digest not sent", zap.Error(err))
	}
}

// PeerUp is Census's OnPeer for a registration: peer runs incarnation inc.
// Any presences of an older incarnation of peer are dropped, and peer is
// asked for its state of every topic.
func (r *Replica) PeerUp(peer string, inc uint64) {
	if peer == r.self {
		return
	}
	r.mu.Lock()
	r.dropLocked(peer, inc-1)
	started := r.started && !r.stopped
	r.mu.Unlock()
	if !started {
		return // Start asks every registered peer
	}
	r.send(peer, &repMsg{Kind: repWant, Inc: inc, All: true})
}

// PeerDown is Census's OnPeer for a departure: every presence of peer's
// incarnations up to inc is dropped (subscribers see them leave at the next
// flush), and nothing from those incarnations is accepted again.
func (r *Replica) PeerDown(peer string, inc uint64) {
	r.mu.Lock()
	r.dead[peer] = max(r.dead[peer], inc)
	n := r.dropLocked(peer, inc)
	r.mu.Unlock()
	r.tc.Emit("presence.dropped", "node", r.self, "peer", peer, "inc", inc, "presences", n)
}

// dropLocked removes every record of peer with an incarnation up to inc and
// returns how many presences went.
func (r *Replica) dropLocked(peer string, inc uint64) int {
	n := 0
	for _, ts := range r.topics {
		if rec := ts.remote[peer]; rec != nil && rec.inc <= inc {
			n += len(rec.entries)
			r.setRecordLocked(ts, peer, nil)
		}
	}
	for k, a := range r.parts {
		if a.inc <= inc && len(k) > len(peer) && k[:len(peer)] == peer && k[len(peer)] == 0 {
			delete(r.parts, k)
		}
	}
	return n
}

// setRecordLocked replaces peer's record of ts with rec (nil: none) and
// records the difference for subscribers.
func (r *Replica) setRecordLocked(ts *repTopicState, peer string, rec *record) {
	old := ts.remote[peer]
	if old != nil {
		for ref, e := range old.entries {
			if rec == nil || rec.entries[ref] == nil {
				ts.changeLocked(e, false)
			}
		}
	}
	if rec == nil || len(rec.entries) == 0 {
		delete(ts.remote, peer)
	} else {
		ts.remote[peer] = rec
	}
	if rec != nil {
		for ref, e := range rec.entries {
			if old == nil || old.entries[ref] == nil {
				ts.changeLocked(e, true)
			} else {
				rec.entries[ref] = old.entries[ref] // keep its arrival order
			}
		}
	}
}

func (r *Replica) send(to string, m *repMsg) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := r.tr.Send(ctx, to, encodeRep(m)); err != nil {
		r.log.Debug("presence: message not sent", zap.String("to", to), zap.String("kind", m.Kind), zap.Error(err))
	}
}

// repHandler adapts Replica to muster.Handler without exporting the methods.
type repHandler struct{ r *Replica }

func (h repHandler) HandleMessage(from string, msg []byte) { h.r.handle(from, msg) }

func (h repHandler) HandleCall(context.Context, string, []byte) ([]byte, error) {
	return nil, ErrNoCalls
}

// handle applies one message from node from. A message that does not
// decode, or comes from a node or incarnation that Census does not list as
// a live peer, changes nothing.
func (r *Replica) handle(from string, b []byte) {
	if from == r.self {
		return
	}
	m, err := decodeRep(b)
	if err != nil {
		r.log.Warn("presence: dropping message", zap.String("from", from), zap.Error(err))
		return
	}
	if m.Kind == repWant {
		if m.Inc == r.cfg.Incarnation() {
			r.answerWant(from, m)
		}
		return
	}
	if r.cfg.Peers()[from] != m.Inc {
		r.tc.Emit("presence.ignored", "node", r.self, "from", from, "kind", m.Kind, "reason", "peer")
		return
	}
	var want []string
	r.mu.Lock()
	if m.Inc <= r.dead[from] {
		r.mu.Unlock()
		r.tc.Emit("presence.ignored", "node", r.self, "from", from, "kind", m.Kind, "reason", "dead")
		return
	}
	switch m.Kind {
	case repDelta:
		for i := range m.Topics {
			if !r.applyDeltaLocked(from, m.Inc, &m.Topics[i]) {
				want = append(want, m.Topics[i].Topic)
			}
		}
	case repState:
		for i := range m.Topics {
			r.applyStatePartLocked(from, m.Inc, &m.Topics[i])
		}
	case repDigest:
		want = r.applyDigestLocked(from, m)
	}
	r.mu.Unlock()
	r.tc.Emit("presence.applied", "node", r.self, "from", from, "kind", m.Kind, "topics", len(m.Topics)+len(m.Digest))
	if len(want) > 0 {
		for _, t := range want {
			r.tc.Emit("presence.gap", "node", r.self, "from", from, "topic", t)
		}
		r.send(from, &repMsg{Kind: repWant, Inc: m.Inc, Want: want})
	}
}

// current returns peer's record of ts if it belongs to incarnation inc,
// dropping one of an older incarnation; ok is false when the record is of
// a newer incarnation.
func (r *Replica) currentLocked(ts *repTopicState, peer string, inc uint64) (rec *record, ok bool) {
	rec = ts.remote[peer]
	switch {
	case rec == nil:
		return nil, true
	case rec.inc < inc:
		r.setRecordLocked(ts, peer, nil)
		return nil, true
	case rec.inc > inc:
		return nil, false
	}
	return rec, true
}

// applyDeltaLocked applies one topic's delta; false means a gap (the
// delta does not start where the replica is), to be repaired by a state.
func (r *Replica) applyDeltaLocked(peer string, inc uint64, d *repTopic) bool {
	ts := r.topic(d.Topic)
	rec, ok := r.currentLocked(ts, peer, inc)
	if !ok {
		return true
	}
	var cur uint64
	if rec != nil {
		cur = rec.clock
	}
	switch {
	case d.Prev == cur:
	case d.Clock <= cur:
		return true // already applied, or older than a state applied
	default:
		return false
	}
	next := &record{inc: inc, clock: d.Clock, entries: map[string]*rentry{}}
	if rec != nil {
		maps.Copy(next.entries, rec.entries)
	}
	for _, j := range d.Joins {
		r.seq++
		next.entries[j.Ref] = &rentry{key: j.Key, ref: j.Ref, meta: j.Meta, seq: r.seq}
	}
	for _, l := range d.Leaves {
		delete(next.entries, l)
	}
	r.setRecordLocked(ts, peer, next)
	return true
}

// applyStatePartLocked collects a part of a topic's state and, once every
// part is in, replaces peer's record with it unless the record is newer.
func (r *Replica) applyStatePartLocked(peer string, inc uint64, s *repTopic) {
	entries := s.Joins
	if s.Parts > 1 {
		k := peer + "\x00" + s.Topic
		a := r.parts[k]
		switch {
		case a == nil || a.inc < inc || (a.inc == inc && a.clock < s.Clock):
			a = &stateAssembly{inc: inc, clock: s.Clock, got: make([]bool, s.Parts)}
			r.parts[k] = a
		case a.inc > inc || a.clock > s.Clock || len(a.got) != s.Parts:
			return // a part of an older transfer, or of an inconsistent one
		}
		if a.got[s.Part] {
			return
		}
		a.got[s.Part] = true
		a.n++
		a.entries = append(a.entries, s.Joins...)
		if a.n < len(a.got) {
			return
		}
		delete(r.parts, k)
		entries = a.entries
	}
	ts := r.topic(s.Topic)
	rec, ok := r.currentLocked(ts, peer, inc)
	if !ok || (rec != nil && rec.clock > s.Clock) {
		return
	}
	next := &record{inc: inc, clock: s.Clock, entries: make(map[string]*rentry, len(entries))}
	for _, j := range entries {
		r.seq++
		next.entries[j.Ref] = &rentry{key: j.Key, ref: j.Ref, meta: j.Meta, seq: r.seq}
	}
	r.setRecordLocked(ts, peer, next)
}

// applyDigestLocked compares peer's digest with the replica: a topic the
// peer lists ahead of the replica is wanted; a topic the replica holds but
// the peer does not list, at a clock below the digest's, is dropped (the
// peer had no presence there when it sent the digest).
func (r *Replica) applyDigestLocked(peer string, m *repMsg) []string {
	var want []string
	for name, c := range m.Digest {
		var cur uint64
		if ts := r.topics[name]; ts != nil {
			if rec, ok := r.currentLocked(ts, peer, m.Inc); !ok {
				continue
			} else if rec != nil {
				cur = rec.clock
			}
		}
		if c > cur {
			want = append(want, name)
		}
	}
	for name, ts := range r.topics {
		if _, listed := m.Digest[name]; listed {
			continue
		}
		if rec, ok := r.currentLocked(ts, peer, m.Inc); ok && rec != nil && rec.clock < m.Clock {
			r.setRecordLocked(ts, peer, nil)
		}
	}
	slices.Sort(want)
	return want
}

// stateChunk is the most presences one state message carries.
const stateChunk = 500

// answerWant sends from this node's state of the wanted topics (all topics
// with local presences, for a want of all). A wanted topic with no local
// presence is sent empty at the current clock, which clears it.
func (r *Replica) answerWant(from string, m *repMsg) {
	r.mu.Lock()
	inc := r.cfg.Incarnation()
	names := m.Want
	if m.All {
		names = nil
		for name, ts := range r.topics {
			if len(ts.local) > 0 {
				names = append(names, name)
			}
		}
		slices.Sort(names)
	}
	msgs := r.stateMsgsLocked(inc, names)
	r.mu.Unlock()
	for _, msg := range msgs {
		r.send(from, msg)
	}
}

// stateMsgsLocked builds the state messages of names: at most stateChunk
// presences per message, a topic larger than that in parts. A topic with
// no local presence is sent empty at the current clock.
func (r *Replica) stateMsgsLocked(inc uint64, names []string) []*repMsg {
	var msgs []*repMsg
	cur := &repMsg{Kind: repState, Inc: inc}
	n := 0
	for _, name := range names {
		ts := r.topics[name]
		clock := max(r.clock, 1)
		var es []*rentry
		if ts != nil && len(ts.local) > 0 {
			clock = ts.lclock
			es = sortedEntries(ts.local)
		}
		parts := max(1, (len(es)+stateChunk-1)/stateChunk)
		for p := range parts {
			chunk := es[min(p*stateChunk, len(es)):min((p+1)*stateChunk, len(es))]
			rt := repTopic{Topic: name, Clock: clock, Part: p, Parts: parts}
			for _, e := range chunk {
				rt.Joins = append(rt.Joins, repEntry{Key: e.key, Ref: e.ref, Meta: e.meta})
			}
			if n > 0 && n+len(chunk) > stateChunk {
				msgs = append(msgs, cur)
				cur, n = &repMsg{Kind: repState, Inc: inc}, 0
			}
			cur.Topics = append(cur.Topics, rt)
			n += max(1, len(chunk))
		}
	}
	if len(cur.Topics) > 0 {
		msgs = append(msgs, cur)
	}
	return msgs
}

// refSource mints phx_refs: 12 bytes (6 random per source, 6 of a
// counter), base64url without padding, 16 characters. Not safe for
// concurrent use.
type refSource struct {
	prefix [6]byte
	n      uint64
}

func newRefSource() *refSource {
	s := &refSource{}
	_, _ = rand.Read(s.prefix[:])
	return s
}

func (s *refSource) next() string {
	s.n++
	var b [12]byte
	copy(b[:6], s.prefix[:])
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], s.n)
	copy(b[6:], n[2:])
	return base64.RawURLEncoding.EncodeToString(b[:])
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
