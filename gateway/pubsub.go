package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relaygw/relay/channels"
	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/session"
	"go.uber.org/zap"
)

// PubSub is Muster-routed topic fan-out between nodes (docs/OWNERSHIP.md
// "Muster-routed PubSub"; the wiring rules are corrections 11 and 13 of
// docs/MUSTER.md "History"):
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
// Live delivery is at-most-once; the replay log closes gaps.
type PubSub struct {
	self  string
	scope *muster.Scope
	tr    muster.Transport
	hub   *channels.Hub
	log   *zap.Logger
	m     *metrics

	mu      sync.Mutex
	members map[string]*topicMember // topics with local subscribers

	sent, floods, received atomic.Int64
}

// psMessage is the wire form of a routed event. Kind "route" goes to the
// router, "deliver" to a node that holds the topic.
type psMessage struct {
	Kind     string          `json:"k"`
	Topic    string          `json:"t"`
	Event    string          `json:"e"`
	Origin   string          `json:"o"`
	ViewHash uint64          `json:"h,omitempty"`
	Epoch    int64           `json:"E"`
	Seq      int64           `json:"S"`
	Payload  json.RawMessage `json:"p"`
}

// topicMember is this node's Muster member for one topic: it exists while the
// topic has local subscribers. Its done channel closes when the last one leaves.
type topicMember struct {
	id   string
	done chan struct{}
}

func (m *topicMember) ID() string            { return m.id }
func (m *topicMember) Done() <-chan struct{} { return m.done }

// PubSubCounts are a node's routed-delivery counters.
type PubSubCounts struct {
	Sent     int64 `json:"sent"`     // messages sent to other nodes (to a router or a target)
	Floods   int64 `json:"floods"`   // floods started (table not trusted, or no longer the router)
	Received int64 `json:"received"` // deliveries received from other nodes
}

// Counts returns the node's routed-delivery counters.
func (p *PubSub) Counts() PubSubCounts {
	return PubSubCounts{Sent: p.sent.Load(), Floods: p.floods.Load(), Received: p.received.Load()}
}

// musterJoinWait bounds how long a channel join waits for Muster's join before
// replying ok (muster-history correction 13: 4 s upstream).
const musterJoinWait = 4 * time.Second

func newPubSub(self string, scope *muster.Scope, tr muster.Transport, hub *channels.Hub, log *zap.Logger, m *metrics) *PubSub {
	return &PubSub{self: self, scope: scope, tr: tr, hub: hub, log: log, m: m, members: make(map[string]*topicMember)}
}

// onFirstSubscriber joins the topic's Muster group. The hub calls it before
// the first local subscription returns, so a channel join waits (bounded) for
// Muster's join and an early routed broadcast cannot miss the socket.
func (p *PubSub) onFirstSubscriber(topic string) {
	m := &topicMember{id: topic + "@" + p.self, done: make(chan struct{})}
	p.mu.Lock()
	p.members[topic] = m
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), musterJoinWait)
	defer cancel()
	if err := p.scope.Join(ctx, topic, m); err != nil {
		p.log.Warn("muster join failed; the topic is reached by floods until it succeeds", zap.String("topic", topic), zap.Error(err))
	}
}

// onLastUnsubscribe leaves the topic's Muster group.
func (p *PubSub) onLastUnsubscribe(topic string) {
	p.mu.Lock()
	m := p.members[topic]
	delete(p.members, topic)
	p.mu.Unlock()
	if m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), musterJoinWait)
	defer cancel()
	if err := p.scope.Leave(ctx, topic, m); err != nil {
		p.log.Debug("muster leave failed; the member's done signal removes it", zap.String("topic", topic), zap.Error(err))
	}
	close(m.done)
}

// Publish implements session.Publisher.
func (p *PubSub) Publish(ctx context.Context, ev session.Event) error {
	payload, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("gateway: encode event %s/%s: %w", ev.Session, ev.Pos(), err)
	}
	topic := session.Topic(ev.Session)
	p.m.published.Inc()
	p.m.deliveries.Add(float64(p.hub.Broadcast(topic, ev.Type, payload, ev.Pos())))

	msg := psMessage{Topic: topic, Event: ev.Type, Origin: p.self, Epoch: ev.Epoch, Seq: ev.Seq, Payload: payload}
	r := p.scope.Router(topic)
	switch {
	case r.Status == muster.RouteOK && r.Node == p.self:
		p.fanout(ctx, msg, p.scope.ViewHash())
	case r.Status == muster.RouteOK:
		msg.Kind, msg.ViewHash = "route", p.scope.ViewHash()
		p.send(ctx, r.Node, msg)
	default: // rebalancing: every member of the view
		msg.Kind = "deliver"
		for _, n := range r.Members {
			if n != p.self {
				p.send(ctx, n, msg)
			}
		}
	}
	return nil
}

// fanout runs on the topic's router: deliver to exactly the nodes that hold
// the topic, or flood when the table cannot be trusted.
func (p *PubSub) fanout(ctx context.Context, msg psMessage, senderHash uint64) {
	msg.Kind = "deliver"
	if r := p.scope.Router(msg.Topic); r.Status != muster.RouteOK || r.Node != p.self {
		p.flood(ctx, msg)
		return
	}
	nodes, ok := p.scope.Targets(msg.Topic, senderHash)
	if !ok {
		p.flood(ctx, msg)
		return
	}
	for _, n := range nodes {
		switch n {
		case msg.Origin:
		case p.self:
			p.deliver(msg)
		default:
			p.send(ctx, n, msg)
		}
	}
}

func (p *PubSub) flood(ctx context.Context, msg psMessage) {
	p.floods.Add(1)
	p.m.floods.Inc()
	b, _ := json.Marshal(msg)
	if err := p.tr.Broadcast(ctx, b); err != nil {
		p.log.Debug("flood failed", zap.String("topic", msg.Topic), zap.Error(err))
	}
	if msg.Origin != p.self {
		p.deliver(msg)
	}
}

func (p *PubSub) send(ctx context.Context, to string, msg psMessage) {
	b, _ := json.Marshal(msg)
	p.sent.Add(1)
	p.m.nodeMessages.Inc()
	if err := p.tr.Send(ctx, to, b); err != nil {
		p.log.Debug("send failed", zap.String("to", to), zap.String("topic", msg.Topic), zap.Error(err))
	}
}

func (p *PubSub) deliver(msg psMessage) {
	d := p.hub.Broadcast(msg.Topic, msg.Event, msg.Payload, session.Position{Epoch: msg.Epoch, Seq: msg.Seq})
	p.m.deliveries.Add(float64(d))
}

// HandleMessage implements muster.Handler for the pubsub transport.
func (p *PubSub) HandleMessage(_ string, b []byte) {
	var msg psMessage
	if err := json.Unmarshal(b, &msg); err != nil {
		p.log.Debug("dropping malformed pubsub message", zap.Error(err))
		return
	}
	switch msg.Kind {
	case "route":
		p.fanout(context.Background(), msg, msg.ViewHash)
	case "deliver":
		if msg.Origin != p.self {
			p.received.Add(1)
			p.deliver(msg)
		}
	}
}

// HandleCall implements muster.Handler; pubsub makes no calls.
func (p *PubSub) HandleCall(context.Context, string, []byte) ([]byte, error) {
	return nil, fmt.Errorf("gateway: pubsub takes no calls")
}
