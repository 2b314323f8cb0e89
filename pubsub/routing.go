package pubsub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
)

// Routing is how a PubSub carries session events between nodes
// (PUBSUB_ROUTING; docs/MUSTER.md "Routing modes").
type Routing string

const (
	// RoutingMuster sends each event to its topic's router node, which
	// sends it on to exactly the nodes holding the topic (the default).
	RoutingMuster Routing = "muster"
	// RoutingSubjects publishes each event on one NATS subject per topic,
	// <prefix>.topic.<token> (TopicSubject); a node subscribes to the
	// subjects of the topics it has local subscribers for, and NATS's own
	// interest routing carries the event to those nodes only.
	RoutingSubjects Routing = "subjects"
	// RoutingFlood publishes each event on one cluster-wide subject,
	// <prefix>.flood (FloodSubject), that every node receives; a node hands
	// an event to its sockets only when it holds the topic.
	RoutingFlood Routing = "flood"
)

// Routings lists the valid Routing values, the default first.
var Routings = []Routing{RoutingMuster, RoutingSubjects, RoutingFlood}

// ErrRouting is returned by ParseRouting for an unknown value.
var ErrRouting = errors.New("pubsub: unknown routing")

// ParseRouting returns the Routing named s ("" is RoutingMuster). An unknown
// name returns an error wrapping ErrRouting that lists the valid ones.
func ParseRouting(s string) (Routing, error) {
	if s == "" {
		return RoutingMuster, nil
	}
	for _, r := range Routings {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("%w %q: want muster, subjects or flood", ErrRouting, s)
}

// maxTopicToken bounds the subject token TopicSubject builds from a topic:
// longer escapes are replaced by a hash, so a subject stays far below NATS's
// control-line limit (4 KiB by default) whatever the topic.
const maxTopicToken = 256

// TopicSubject is the NATS subject of topic under RoutingSubjects:
// prefix + ".topic." + the topic escaped into one subject token. Bytes of
// [A-Za-z0-9_:-] stand for themselves; every other byte (the '.' token
// separator, the '*' and '>' wildcards, white space, '%', non-ASCII) is
// written %XX (upper-case hex), and the empty topic is "%", so distinct
// topics get distinct tokens. An escape longer than 256 bytes is replaced by
// "%h" and the hex SHA-256 of the topic; receivers check a message's topic,
// so a collision could only cost a node a message it drops.
func TopicSubject(prefix, topic string) string {
	return prefix + ".topic." + topicToken(topic)
}

// FloodSubject is the one subject every node receives under RoutingFlood.
func FloodSubject(prefix string) string { return prefix + ".flood" }

func topicToken(topic string) string {
	if topic == "" {
		return "%"
	}
	const hexDigits = "0123456789ABCDEF"
	b := make([]byte, 0, len(topic))
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == ':', c == '-':
			b = append(b, c)
		default:
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		}
		if len(b) > maxTopicToken {
			sum := sha256.Sum256([]byte(topic))
			return "%h" + hex.EncodeToString(sum[:])
		}
	}
	return string(b)
}

// busInboxLen is the queue between NATS's reader and the delivering
// goroutine; when it is full NATS drops messages as a slow consumer
// (counted as OpBus errors, the replay log closes the gap on rejoin).
const busInboxLen = 1 << 16

// bus is the NATS side of the subjects and flood routings.
type bus struct {
	nc     *nats.Conn
	prefix string
	inbox  chan *nats.Msg
	done   chan struct{}
	wg     sync.WaitGroup

	mu    sync.Mutex
	subs  map[string]*nats.Subscription // subjects routing: topic -> its subscription
	flood *nats.Subscription
}

func (p *PubSub) busMode() bool { return p.routing != RoutingMuster }

// Start begins receiving under RoutingSubjects and RoutingFlood (the flood
// routing subscribes to FloodSubject here, and waits for the server to
// confirm it, up to JoinWait when ctx has no deadline). Under RoutingMuster it does nothing: the caller starts the
// Transport. Call it once, before the node takes sockets.
func (p *PubSub) Start(ctx context.Context) error {
	if !p.busMode() {
		return nil
	}
	b := p.bus
	b.nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		p.fail(OpBus, "pubsub NATS error; a dropped event reaches the socket on its next rejoin", zap.Error(err))
	})
	b.wg.Add(1)
	go p.busLoop()
	if p.routing == RoutingFlood {
		s, err := b.nc.ChanSubscribe(FloodSubject(b.prefix), b.inbox)
		if err != nil {
			return fmt.Errorf("pubsub: subscribe %s: %w", FloodSubject(b.prefix), err)
		}
		b.mu.Lock()
		b.flood = s
		b.mu.Unlock()
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, p.joinWait)
			defer cancel()
		}
		if err := b.nc.FlushWithContext(ctx); err != nil {
			return fmt.Errorf("pubsub: confirm the flood subscription: %w", err)
		}
	}
	return nil
}

// Close stops receiving under RoutingSubjects and RoutingFlood: it removes
// the node's subscriptions and waits for the delivering goroutine. It does
// not close the NATS connection (the caller's). A no-op under RoutingMuster.
func (p *PubSub) Close() {
	if !p.busMode() {
		return
	}
	b := p.bus
	b.mu.Lock()
	for t, s := range b.subs {
		_ = s.Unsubscribe()
		delete(b.subs, t)
	}
	if b.flood != nil {
		_ = b.flood.Unsubscribe()
		b.flood = nil
	}
	b.mu.Unlock()
	select {
	case <-b.done:
	default:
		close(b.done)
	}
	b.wg.Wait()
}

func (p *PubSub) busLoop() {
	b := p.bus
	defer b.wg.Done()
	for {
		select {
		case <-b.done:
			return
		case m := <-b.inbox:
			p.handleBus(m.Data)
		}
	}
}

// handleBus delivers one message received on a topic subject or the flood
// subject to local sockets, unless this node published it.
func (p *PubSub) handleBus(data []byte) {
	var msg Message
	if err := msg.UnmarshalBinary(data); err != nil || msg.Kind != KindDeliver {
		if err == nil {
			err = fmt.Errorf("%w: %v on a %s subject", ErrMalformed, msg.Kind, p.routing)
		}
		p.fail(OpDecode, "dropping an undecodable pubsub message", zap.Error(err))
		return
	}
	if msg.Origin == p.self {
		return
	}
	p.received.Add(1)
	p.deliver(&msg)
}

// joinSubject subscribes to topic's subject (RoutingSubjects) and waits,
// up to JoinWait, for the server to confirm it: a publication after
// JoinTopic returns reaches this node.
func (p *PubSub) joinSubject(topic string) {
	b := p.bus
	subj := TopicSubject(b.prefix, topic)
	s, err := b.nc.ChanSubscribe(subj, b.inbox)
	if err != nil {
		p.fail(OpJoin, "subscribing to the topic's subject failed; the topic's live events miss this node until a rejoin", zap.String("topic", topic), zap.Error(err))
		return
	}
	b.mu.Lock()
	old := b.subs[topic]
	b.subs[topic] = s
	b.mu.Unlock()
	if old != nil {
		_ = old.Unsubscribe()
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.joinWait)
	defer cancel()
	if err := b.nc.FlushWithContext(ctx); err != nil {
		p.fail(OpJoin, "the server did not confirm the topic's subscription in time; live events may miss this node until it does", zap.String("topic", topic), zap.Error(err))
	}
}

// leaveSubject removes topic's subscription (RoutingSubjects).
func (p *PubSub) leaveSubject(topic string) {
	b := p.bus
	b.mu.Lock()
	s := b.subs[topic]
	delete(b.subs, topic)
	b.mu.Unlock()
	if s != nil {
		_ = s.Unsubscribe()
	}
}

// publishBus publishes msg on its topic's subject or the flood subject.
func (p *PubSub) publishBus(msg *Message) {
	msg.Kind = KindDeliver
	subj := FloodSubject(p.bus.prefix)
	if p.routing == RoutingSubjects {
		subj = TopicSubject(p.bus.prefix, msg.Topic)
	}
	b, _ := msg.MarshalBinary()
	p.sent.Add(1)
	p.m.NodeMessages.Inc()
	p.m.SentBytes.Add(float64(len(b)))
	if err := p.bus.nc.Publish(subj, b); err != nil {
		p.fail(OpSend, "pubsub publish failed; nodes holding the topic miss the event until a rejoin replays it", zap.String("topic", msg.Topic), zap.Stringer("pos", msg.Pos), zap.Error(err))
	}
}
