// Package pubsub is Muster-routed topic fan-out between nodes: the
// session.Publisher of a relay node (docs/OWNERSHIP.md "Muster-routed
// PubSub"; the wiring rules are corrections 11 and 13 of docs/MUSTER.md
// "History"):
//
//   - the origin delivers to its own sockets first and is left out of the
//     routed fan-out;
//   - it asks Router(topic): on RouteOK it sends the event once to the router,
//     tagged with its view hash, or resolves the targets inline when it is the
//     router itself; on RouteRebalancing it sends to every member;
//   - a router re-checks it is still the topic's router and asks
//     Targets(topic, senderViewHash); when it is not the router, or the table
//     cannot be trusted, it floods (the transport's broadcast reaches every
//     node listening on the scope, never a ring-derived list);
//   - a receiving node delivers to its local sockets with one encode.
//
// That is RoutingMuster, the default. Config.Routing selects instead
// RoutingSubjects (one NATS subject per topic: a node subscribes to the
// topics it holds, NATS's interest routing picks the receivers) or
// RoutingFlood (one subject every node receives and filters); see
// routing.go and docs/MUSTER.md "Routing modes". Every routing delivers
// through the same Local (the Sequencer), so ordering and the replay seam
// are the same under all three.
//
// Live delivery is at-most-once; the replay log closes gaps. Messages travel
// in a small versioned binary envelope (Message). Transport failures and
// undecodable messages are counted (Metrics.Errors, Counts) and logged at
// Warn, at most once a second per kind of failure.
package pubsub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/nats-io/nats.go"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/session"
)

// Local delivers a broadcast to this node's sockets subscribed to topic and
// returns how many took it. *channels.Hub implements it. meta is the event's
// agent.Position: a joining channel's replay seam reads it to drop live
// copies of replayed events (session.ReplayResult.Duplicate).
type Local interface {
	Broadcast(topic, event string, payload json.RawMessage, meta any) int
}

// DefaultJoinWait is Config.JoinWait's default (docs/MUSTER.md "History",
// correction 13: 4 s upstream).
const DefaultJoinWait = 4 * time.Second

// Config configures a PubSub. Node, Scope, Transport and Local are required.
type Config struct {
	// Node is this node's name: Muster's node and the transport's address.
	Node string
	// Scope routes topics: Router, Targets, ViewHash, and the group joins
	// of JoinTopic and LeaveTopic.
	Scope *muster.Scope
	// Transport carries PubSub's messages (a scope of its own, apart from
	// Muster's). The caller registers the PubSub on it and starts it.
	Transport muster.Transport
	// Local is this node's socket fan-out.
	Local Local
	// Metrics receives the counters; nil counts on no registry.
	Metrics *Metrics
	// Logger receives logs; failures log at Warn, sampled to one line a
	// second per message. Default zap.NewNop().
	Logger *zap.Logger
	// JoinWait bounds JoinTopic's and LeaveTopic's Muster calls (and, under
	// RoutingSubjects, the wait for the server to confirm a subscription).
	// Default DefaultJoinWait.
	JoinWait time.Duration
	// Routing is how events travel between nodes; "" is RoutingMuster.
	// RoutingSubjects and RoutingFlood need Conn and Prefix, and leave
	// Transport unused (Scope may then be nil).
	Routing Routing
	// Conn carries RoutingSubjects and RoutingFlood: give the PubSub a
	// connection of its own, made with nats.NoEcho() (a node then never
	// receives its own publications), as it sets the connection's error
	// handler. The caller closes it after Close.
	Conn *nats.Conn
	// Prefix is the subject prefix of TopicSubject and FloodSubject (the
	// cluster name).
	Prefix string
}

// PubSub is Muster-routed topic fan-out (see the package doc). It
// implements session.Publisher and muster.Handler. Safe for concurrent use.
type PubSub struct {
	self     string
	scope    *muster.Scope
	tr       muster.Transport
	local    Local
	m        *Metrics
	log      *zap.Logger // Info and Debug
	warn     *zap.Logger // failures: sampled
	joinWait time.Duration
	routing  Routing
	bus      *bus // RoutingSubjects and RoutingFlood

	mu      sync.Mutex
	members map[string]*topicMember // topics with local subscribers

	sent, floods, received, errs atomic.Int64
	deliveries                   atomic.Uint64 // local broadcasts that reached a socket (DeliverySample)
}

var (
	_ session.Publisher = (*PubSub)(nil)
	_ muster.Handler    = (*PubSub)(nil)
)

// New returns a PubSub for cfg. It panics when a required field is missing
// or Routing is unknown (a programming error; ParseRouting checks outside
// input).
func New(cfg Config) *PubSub {
	routing, err := ParseRouting(string(cfg.Routing))
	if err != nil {
		panic(err)
	}
	if routing == RoutingMuster && (cfg.Node == "" || cfg.Scope == nil || cfg.Transport == nil || cfg.Local == nil) {
		panic("pubsub: Config needs Node, Scope, Transport and Local")
	}
	if routing != RoutingMuster && (cfg.Node == "" || cfg.Conn == nil || cfg.Prefix == "" || cfg.Local == nil) {
		panic("pubsub: Config needs Node, Conn, Prefix and Local under routing " + string(routing))
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.JoinWait <= 0 {
		cfg.JoinWait = DefaultJoinWait
	}
	warn := cfg.Logger.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		// First line per message per second; the counters count them all.
		return zapcore.NewSamplerWithOptions(c, time.Second, 1, 0)
	}))
	p := &PubSub{self: cfg.Node, scope: cfg.Scope, tr: cfg.Transport, local: cfg.Local, m: cfg.Metrics,
		log: cfg.Logger, warn: warn, joinWait: cfg.JoinWait, routing: routing, members: make(map[string]*topicMember)}
	if routing != RoutingMuster {
		p.bus = &bus{nc: cfg.Conn, prefix: cfg.Prefix, inbox: make(chan *nats.Msg, busInboxLen),
			done: make(chan struct{}), subs: make(map[string]*nats.Subscription)}
	}
	return p
}

// Routing returns how this PubSub carries events between nodes.
func (p *PubSub) Routing() Routing { return p.routing }

// topicMember is this node's Muster member for one topic: it exists while the
// topic has local subscribers. Its done channel closes when the last one leaves.
type topicMember struct {
	id   string
	done chan struct{}
}

func (m *topicMember) ID() string            { return m.id }
func (m *topicMember) Done() <-chan struct{} { return m.done }

// Counts are a node's routed-delivery counters since start.
type Counts struct {
	Sent     int64 `json:"sent"`     // messages sent to other nodes (to a router or a target)
	Floods   int64 `json:"floods"`   // floods started (table not trusted, or no longer the router)
	Received int64 `json:"received"` // deliveries received from other nodes
	Errors   int64 `json:"errors"`   // failures of every op (Metrics.Errors by op)
}

// Counts returns the node's routed-delivery counters.
func (p *PubSub) Counts() Counts {
	return Counts{Sent: p.sent.Load(), Floods: p.floods.Load(), Received: p.received.Load(), Errors: p.errs.Load()}
}

// fail counts a failure of op and logs it at Warn (sampled).
func (p *PubSub) fail(op, msg string, fields ...zap.Field) {
	p.errs.Add(1)
	p.m.Errors.WithLabelValues(op).Inc()
	p.warn.Warn(msg, append(fields, zap.String("op", op))...)
}

// JoinTopic joins topic's Muster group for this node. Wire it to the hub's
// first-subscriber hook: the hub calls it before the first local
// subscription returns, so a channel join waits (up to JoinWait) for
// Muster's join and a routed broadcast published after the join reply
// cannot miss the socket. A failed join is counted and logged; floods reach
// the topic meanwhile. Under RoutingSubjects it subscribes to the topic's
// subject instead, and waits (up to JoinWait) for the server to confirm it;
// under RoutingFlood it does nothing (every node receives every event).
func (p *PubSub) JoinTopic(topic string) {
	switch p.routing {
	case RoutingSubjects:
		p.joinSubject(topic)
		return
	case RoutingFlood:
		return
	}
	m := &topicMember{id: topic + "@" + p.self, done: make(chan struct{})}
	p.mu.Lock()
	p.members[topic] = m
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), p.joinWait)
	defer cancel()
	if err := p.scope.Join(ctx, topic, m); err != nil {
		p.fail(OpJoin, "muster join failed; the topic is reached by floods until it succeeds", zap.String("topic", topic), zap.Error(err))
	}
}

// LeaveTopic leaves topic's Muster group. Wire it to the hub's
// last-unsubscribe hook. A failed leave is only logged at Debug: closing
// the member's done channel removes it anyway. Under RoutingSubjects it
// removes the topic's subscription; under RoutingFlood it does nothing.
func (p *PubSub) LeaveTopic(topic string) {
	switch p.routing {
	case RoutingSubjects:
		p.leaveSubject(topic)
		return
	case RoutingFlood:
		return
	}
	p.mu.Lock()
	m := p.members[topic]
	delete(p.members, topic)
	p.mu.Unlock()
	if m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.joinWait)
	defer cancel()
	if err := p.scope.Leave(ctx, topic, m); err != nil {
		p.log.Debug("muster leave failed; the member's done signal removes it", zap.String("topic", topic), zap.Error(err))
	}
	close(m.done)
}

// Publish implements session.Publisher: local sockets first, then the routed
// fan-out. It returns an error only when ev cannot be encoded; transport
// failures are counted and logged, never returned (delivery is best effort).
// The routed fan-out does not end with ctx: a local fan-out to many sockets
// can outlast the caller's deadline, and the sends after it only queue
// messages on the transport (they never wait for a reply).
func (p *PubSub) Publish(ctx context.Context, ev agent.Event) error {
	ctx = context.WithoutCancel(ctx)
	payload, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("pubsub: encode event %s/%s: %w", ev.Session, ev.Pos(), err)
	}
	topic := session.Topic(ev.Session)
	p.m.Published.Inc()
	p.sampleDelivery(p.local.Broadcast(topic, ev.Type, payload, ev.Pos()), ev.At, nil)

	msg := Message{Topic: topic, Event: ev.Type, Origin: p.self, Pos: ev.Pos(), Payload: payload}
	if p.busMode() {
		p.publishBus(&msg)
		return nil
	}
	r := p.scope.Router(topic)
	switch {
	case r.Status == muster.RouteOK && r.Node == p.self:
		p.fanout(ctx, msg, p.scope.ViewHash())
	case r.Status == muster.RouteOK:
		msg.Kind, msg.ViewHash = KindRoute, p.scope.ViewHash()
		b, _ := msg.MarshalBinary()
		p.send(ctx, r.Node, b, &msg)
	default: // rebalancing: every member of the view
		msg.Kind = KindDeliver
		b, _ := msg.MarshalBinary()
		for _, n := range r.Members {
			if n != p.self {
				p.send(ctx, n, b, &msg)
			}
		}
	}
	return nil
}

// fanout runs on the topic's router: deliver to exactly the nodes that hold
// the topic, or flood when the table cannot be trusted.
func (p *PubSub) fanout(ctx context.Context, msg Message, senderHash uint64) {
	msg.Kind, msg.ViewHash = KindDeliver, 0
	if r := p.scope.Router(msg.Topic); r.Status != muster.RouteOK || r.Node != p.self {
		p.flood(ctx, &msg)
		return
	}
	nodes, ok := p.scope.Targets(msg.Topic, senderHash)
	if !ok {
		p.flood(ctx, &msg)
		return
	}
	var b []byte // encoded once, for the first remote holder
	for _, n := range nodes {
		switch n {
		case msg.Origin:
		case p.self:
			p.deliver(&msg)
		default:
			if b == nil {
				b, _ = msg.MarshalBinary()
			}
			p.send(ctx, n, b, &msg)
		}
	}
}

func (p *PubSub) flood(ctx context.Context, msg *Message) {
	p.floods.Add(1)
	p.m.Floods.Inc()
	b, _ := msg.MarshalBinary()
	p.m.SentBytes.Add(float64(len(b)))
	if err := p.tr.Broadcast(ctx, b); err != nil {
		p.fail(OpFlood, "pubsub flood failed; nodes holding the topic miss the event until a rejoin replays it", zap.String("topic", msg.Topic), zap.Stringer("pos", msg.Pos), zap.Error(err))
	}
	if msg.Origin != p.self {
		p.deliver(msg)
	}
}

// send sends b, the encoding of msg, to node to; msg names it in logs.
func (p *PubSub) send(ctx context.Context, to string, b []byte, msg *Message) {
	p.sent.Add(1)
	p.m.NodeMessages.Inc()
	p.m.SentBytes.Add(float64(len(b)))
	if err := p.tr.Send(ctx, to, b); err != nil {
		p.fail(OpSend, "pubsub send failed; the node misses the event until a rejoin replays it", zap.String("to", to), zap.Stringer("kind", msg.Kind), zap.String("topic", msg.Topic), zap.Stringer("pos", msg.Pos), zap.Error(err))
	}
}

func (p *PubSub) deliver(msg *Message) {
	p.sampleDelivery(p.local.Broadcast(msg.Topic, msg.Event, msg.Payload, msg.Pos), time.Time{}, msg.Payload)
}

// DeliverySample is the sampling of relay_delivery_latency_seconds: the
// first, then every DeliverySample-th, local broadcast that reached at
// least one socket is observed.
const DeliverySample = 16

// sampleDelivery counts n frames enqueued to local sockets and, for a
// sampled broadcast, observes the time since the event's "at" (at, or read
// from payload, the event's JSON, when at is zero).
func (p *PubSub) sampleDelivery(n int, at time.Time, payload []byte) {
	if n == 0 {
		return
	}
	p.m.Deliveries.Add(float64(n))
	if p.deliveries.Add(1)%DeliverySample != 1 {
		return
	}
	if at.IsZero() {
		var ev struct {
			At time.Time `json:"at"`
		}
		if json.Unmarshal(payload, &ev) != nil || ev.At.IsZero() {
			return
		}
		at = ev.At
	}
	p.m.DeliveryLatency.Observe(max(time.Since(at), 0).Seconds())
}

// HandleMessage implements muster.Handler for the pubsub transport: a
// KindRoute message is fanned out from here as its router, a KindDeliver
// one goes to local sockets (unless this node is its origin). An
// undecodable message is counted (OpDecode), logged and dropped.
func (p *PubSub) HandleMessage(from string, b []byte) {
	var msg Message
	if err := msg.UnmarshalBinary(b); err != nil {
		p.fail(OpDecode, "dropping an undecodable pubsub message", zap.String("from", from), zap.Error(err))
		return
	}
	switch msg.Kind {
	case KindRoute:
		p.fanout(context.Background(), msg, msg.ViewHash)
	case KindDeliver:
		if msg.Origin != p.self {
			p.received.Add(1)
			p.deliver(&msg)
		}
	}
}

// HandleCall implements muster.Handler; PubSub makes no calls.
func (p *PubSub) HandleCall(context.Context, string, []byte) ([]byte, error) {
	return nil, errors.New("pubsub: takes no calls")
}
