package channels

import (
	"encoding/json"
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/relaygw/relay/internal/trace"
)

// Broadcast is one message fanned out to a topic's local subscribers. The Hub
// allocates one per Broadcast call and hands the same pointer to every
// subscriber; treat it as read-only.
type Broadcast struct {
	Topic   string
	Event   string
	Payload json.RawMessage
	// Meta is opaque to this package; the gateway stores the event position
	// there so JoinResult.Skip can drop live duplicates of a replay.
	Meta any
}

// HubConfig configures a Hub.
type HubConfig struct {
	// Shards is the number of registry shards (topics hash to one shard; a
	// Broadcast or subscription touches only its shard). Zero means 64.
	Shards int
	// OnFirstSubscriber is called when a topic gains its first local
	// subscriber; OnLastUnsubscribe when it loses its last. Contract: called
	// outside the registry locks, on the goroutine that subscribed or
	// unsubscribed; calls for one topic are serialized and follow the order of
	// the transitions (first, last, first, ...); calls for different topics
	// may run concurrently. Subscribe returns only after its OnFirstSubscriber
	// call has returned. A hook may Broadcast, but must not subscribe or
	// unsubscribe channels of the same topic (it would deadlock). Keep hooks
	// short: they delay joins and leaves of their topic.
	OnFirstSubscriber func(topic string)
	OnLastUnsubscribe func(topic string)
	// Tracer receives "hub.first" and "hub.last" trace points.
	Tracer *trace.Tracer
}

// DefaultHubConfig returns the defaults: 64 shards, no hooks.
func DefaultHubConfig() HubConfig { return HubConfig{Shards: 64} }

// Hub is the local topic registry: it maps topics to subscribed channels and
// fans broadcasts out to them, encoding each frame once per serializer in use.
// All methods are safe for concurrent use.
//
// Lock order: Channel.subMu → topicEntry.hookMu → hubShard.mu → Channel.mu →
// Socket.outMu.
type Hub struct {
	cfg    HubConfig
	shards []hubShard
}

type hubShard struct {
	mu     sync.RWMutex
	topics map[string]*topicEntry
}

type topicEntry struct {
	subs []*Channel // guarded by the shard's mu
	// refs counts goroutines holding or waiting for hookMu; the entry is
	// removed only when refs is 0 and subs is empty (guarded by shard mu).
	refs   int
	hookMu sync.Mutex // serializes transitions and hooks of one topic
}

// NewHub returns a Hub with DefaultHubConfig.
func NewHub() *Hub { return NewHubWithConfig(DefaultHubConfig()) }

// NewHubWithConfig returns a Hub with cfg; zero fields take defaults.
func NewHubWithConfig(cfg HubConfig) *Hub {
	if cfg.Shards <= 0 {
		cfg.Shards = 64
	}
	h := &Hub{cfg: cfg, shards: make([]hubShard, cfg.Shards)}
	for i := range h.shards {
		h.shards[i].topics = make(map[string]*topicEntry)
	}
	return h
}

func (h *Hub) shard(topic string) *hubShard {
	return &h.shards[xxhash.Sum64String(topic)%uint64(len(h.shards))]
}

// Broadcast sends [null,null,topic,event,payload] (or the V1 object form) to
// every channel subscribed to topic on this node and returns how many
// channels took it. The frame is encoded once per serializer; the same bytes
// are enqueued to every socket. It never blocks on a socket: a socket whose
// queue overflows is cut as a slow consumer. Channels still joining hold the
// broadcast until their join reply is written (see JoinResult.Skip).
// payload must be a valid JSON value; empty means {}.
func (h *Hub) Broadcast(topic, event string, payload json.RawMessage, meta any) int {
	sh := h.shard(topic)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	e := sh.topics[topic]
	if e == nil || len(e.subs) == 0 {
		return 0
	}
	b := &Broadcast{Topic: topic, Event: event, Payload: payload, Meta: meta}
	var frames [numSerializers]Frame
	var encoded [numSerializers]bool
	var pushes map[pushKey]Frame // frames of channels subscribed with their join_ref
	n := 0
	for _, ch := range e.subs {
		i := ch.sock.serIdx
		if ch.withJoinRef {
			k := pushKey{i, ch.joinRef.raw}
			f, ok := pushes[k]
			if !ok {
				var err error
				f, err = ch.sock.ser.EncodePush(ch.joinRef, Ref{}, topic, event, Payload{JSON: payload})
				if err != nil {
					continue
				}
				f.wire = new(wireCache)
				if pushes == nil {
					pushes = make(map[pushKey]Frame)
				}
				pushes[k] = f
			}
			if ch.deliver(f, b) {
				n++
			}
			continue
		}
		if !encoded[i] {
			f, err := ch.sock.ser.EncodeBroadcast(topic, event, payload)
			if err != nil {
				continue
			}
			f.wire = new(wireCache) // framed once for all its WebSocket sockets
			frames[i], encoded[i] = f, true
		}
		if ch.deliver(frames[i], b) {
			n++
		}
	}
	return n
}

// pushKey names a frame encoded for channels of one serializer and join_ref.
type pushKey struct {
	ser     int
	joinRef string
}

// Subscribers returns how many local channels are subscribed to topic.
func (h *Hub) Subscribers(topic string) int {
	sh := h.shard(topic)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	if e := sh.topics[topic]; e != nil {
		return len(e.subs)
	}
	return 0
}

// Topics returns the topics with at least one local subscriber, in no order.
func (h *Hub) Topics() []string {
	var out []string
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.RLock()
		for t, e := range sh.topics {
			if len(e.subs) > 0 {
				out = append(out, t)
			}
		}
		sh.mu.RUnlock()
	}
	return out
}

// enter returns topic's entry, creating it, with refs incremented and its
// hookMu held.
func (h *Hub) enter(sh *hubShard, topic string) *topicEntry {
	sh.mu.Lock()
	e := sh.topics[topic]
	if e == nil {
		e = &topicEntry{}
		sh.topics[topic] = e
	}
	e.refs++
	sh.mu.Unlock()
	e.hookMu.Lock()
	return e
}

// leave releases what enter took and removes an unused entry.
func (h *Hub) leave(sh *hubShard, topic string, e *topicEntry) {
	sh.mu.Lock()
	e.refs--
	if e.refs == 0 && len(e.subs) == 0 && sh.topics[topic] == e {
		delete(sh.topics, topic)
	}
	sh.mu.Unlock()
	e.hookMu.Unlock()
}

// subscribe adds ch to its topic. The caller holds ch.subMu.
func (h *Hub) subscribe(ch *Channel) {
	sh := h.shard(ch.topic)
	e := h.enter(sh, ch.topic)
	sh.mu.Lock()
	ch.hubIdx = len(e.subs)
	e.subs = append(e.subs, ch)
	first := len(e.subs) == 1
	sh.mu.Unlock()
	if first {
		h.cfg.Tracer.Emit("hub.first", "topic", ch.topic)
		if h.cfg.OnFirstSubscriber != nil {
			h.cfg.OnFirstSubscriber(ch.topic)
		}
	}
	h.leave(sh, ch.topic, e)
}

// unsubscribe removes ch from its topic. The caller holds ch.subMu.
func (h *Hub) unsubscribe(ch *Channel) {
	sh := h.shard(ch.topic)
	e := h.enter(sh, ch.topic)
	sh.mu.Lock()
	last := false
	if i := ch.hubIdx; i < len(e.subs) && e.subs[i] == ch {
		n := len(e.subs) - 1
		e.subs[i] = e.subs[n]
		e.subs[i].hubIdx = i
		e.subs[n] = nil
		e.subs = e.subs[:n]
		last = n == 0
		if n == 0 {
			e.subs = nil
		}
	}
	sh.mu.Unlock()
	if last {
		h.cfg.Tracer.Emit("hub.last", "topic", ch.topic)
		if h.cfg.OnLastUnsubscribe != nil {
			h.cfg.OnLastUnsubscribe(ch.topic)
		}
	}
	h.leave(sh, ch.topic, e)
}
