package pubsub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/muster/natstransport"
	"github.com/relaygw/relay/pubsub"
	"github.com/relaygw/relay/session"
)

func TestParseRouting(t *testing.T) {
	for _, s := range []string{"", "muster", "subjects", "flood"} {
		r, err := pubsub.ParseRouting(s)
		if err != nil || (s == "" && r != pubsub.RoutingMuster) || (s != "" && string(r) != s) {
			t.Fatalf("ParseRouting(%q) = %q, %v", s, r, err)
		}
	}
	for _, s := range []string{"Muster", "subject", "broadcast", " flood"} {
		if _, err := pubsub.ParseRouting(s); !errors.Is(err, pubsub.ErrRouting) {
			t.Fatalf("ParseRouting(%q) = %v, want ErrRouting", s, err)
		}
	}
}

// checkToken reports why tok is not one NATS subject token within the bound.
func checkToken(topic, tok string) error {
	if tok == "" || len(tok) > 256 {
		return fmt.Errorf("token of %q is %d bytes", topic, len(tok))
	}
	if strings.ContainsAny(tok, ".*> \t\r\n\f\v") {
		return fmt.Errorf("token %q of %q has a separator, wildcard or space", tok, topic)
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < 0x21 || tok[i] > 0x7e {
			return fmt.Errorf("token %q of %q has byte %#x", tok, topic, tok[i])
		}
	}
	return nil
}

func topicToken(topic string) string {
	return strings.TrimPrefix(pubsub.TopicSubject("p", topic), "p.topic.")
}

func TestTopicSubject(t *testing.T) {
	for topic, want := range map[string]string{
		"session:abc":           "p.topic.session:abc",
		"session:a.b":           "p.topic.session:a%2Eb",
		"session:*":             "p.topic.session:%2A",
		"x>y z%":                "p.topic.x%3Ey%20z%25",
		"":                      "p.topic.%",
		"session:A_b-9":         "p.topic.session:A_b-9",
		"caf\xc3\xa9":           "p.topic.caf%C3%A9",
		strings.Repeat(".", 86): "p.topic.%h" + "", // replaced below
	} {
		got := pubsub.TopicSubject("p", topic)
		if strings.HasPrefix(topic, "..") {
			if !strings.HasPrefix(got, "p.topic.%h") || len(got) != len("p.topic.%h")+64 {
				t.Fatalf("long topic: subject %q, want a hashed token", got)
			}
			continue
		}
		if got != want {
			t.Fatalf("TopicSubject(%q) = %q, want %q", topic, got, want)
		}
	}
	if got := pubsub.FloodSubject("p"); got != "p.flood" {
		t.Fatalf("FloodSubject = %q", got)
	}
}

// FuzzTopicSubject: any topic (a session id accepted by agent.ValidID, or
// any other string) maps to one valid subject token, and distinct topics to
// distinct tokens, so a subscription never receives another topic's events
// by escaping.
func FuzzTopicSubject(f *testing.F) {
	for _, s := range []string{"session:a", "session:a.b", "*", ">", "", "%", "%25", "a b", strings.Repeat("é", 200)} {
		f.Add(s, s+".")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ta, tb := topicToken(a), topicToken(b)
		if err := checkToken(a, ta); err != nil {
			t.Fatal(err)
		}
		if err := checkToken(b, tb); err != nil {
			t.Fatal(err)
		}
		if a != b && ta == tb {
			t.Fatalf("topics %q and %q share token %q", a, b, ta)
		}
		if id := strings.TrimPrefix(a, "session:"); agent.ValidID(id) && strings.Contains(ta, "%h") {
			t.Fatalf("a session topic %q was hashed: %q", a, ta)
		}
	})
}

// seqLocal records the positions a node hands its sockets, per topic, and
// signals when a topic has reached a count.
type seqLocal struct {
	mu   sync.Mutex
	got  map[string][]int64
	wake chan struct{}
	// onBroadcast, when set, runs at each Broadcast (a forced ordering).
	onBroadcast func()
}

func newSeqLocal() *seqLocal {
	return &seqLocal{got: map[string][]int64{}, wake: make(chan struct{}, 1)}
}

func (l *seqLocal) Broadcast(topic, _ string, _ json.RawMessage, meta any) int {
	p, _ := meta.(agent.Position)
	l.mu.Lock()
	l.got[topic] = append(l.got[topic], p.Seq)
	hook := l.onBroadcast
	l.mu.Unlock()
	if hook != nil {
		hook()
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return 1
}

func (l *seqLocal) seqs(topic string) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got[topic])
}

// waitFor waits until topic has n positions.
func (l *seqLocal) waitFor(t *testing.T, who, topic string, n int) []int64 {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		if got := l.seqs(topic); len(got) >= n {
			return got
		}
		select {
		case <-l.wake:
		case <-deadline:
			t.Fatalf("%s: %s reached %v, want %d events", who, topic, l.seqs(topic), n)
		}
	}
}

// natsPS is one node of the per-routing tests: a Muster scope and a PubSub,
// each on its own NATS connection, the PubSub behind a Sequencer.
type natsPS struct {
	name  string
	scope *muster.Scope
	conn  *nats.Conn // the PubSub's connection
	ps    *pubsub.PubSub
	local *seqLocal
}

func startNATSNodes(t testing.TB, routing pubsub.Routing, names ...string) []*natsPS {
	t.Helper()
	prefix := testenv.NATSPrefix(t)
	var out []*natsPS
	for _, name := range names {
		scope, err := muster.New(muster.Config{
			Name: "sessions", Node: name, Transport: natstransport.New(testenv.NATSConn(t), natstransport.Config{Prefix: prefix, Scope: "sessions", Node: name}),
			Shards: 2, ViewHeartbeat: 100 * time.Millisecond, PingInterval: 50 * time.Millisecond, PeerDownAfter: 3 * time.Second,
			RPCTimeout: time.Second, GatherTimeout: 5 * time.Second, Cooldown: 50 * time.Millisecond,
			VacantFlush: time.Hour, TombstoneWindow: time.Hour, SingletonPromotion: 100 * time.Millisecond,
			AntiEntropy: -1, DrainSettle: 10 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := scope.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		n := &natsPS{name: name, scope: scope, local: newSeqLocal()}
		seq := pubsub.NewSequencer(n.local, pubsub.SequencerConfig{})
		cfg := pubsub.Config{Node: name, Scope: scope, Local: seq, Routing: routing, Prefix: prefix}
		var tr *natstransport.Transport
		if routing == pubsub.RoutingMuster {
			n.conn = testenv.NATSConn(t)
			tr = natstransport.New(n.conn, natstransport.Config{Prefix: prefix, Scope: "pubsub", Node: name})
			cfg.Transport = tr
		} else {
			n.conn = testenv.NATSConn(t, nats.NoEcho())
			cfg.Conn = n.conn
		}
		n.ps = pubsub.New(cfg)
		if tr != nil {
			tr.Register(n.ps)
			if err := tr.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if err := n.ps.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			n.ps.Close()
			if tr != nil {
				_ = tr.Close()
			}
			seq.Close()
			_ = scope.Close()
		})
		out = append(out, n)
	}
	deadline := time.Now().Add(20 * time.Second)
	for ready := false; !ready; {
		ready = true
		for _, n := range out {
			if n.scope.Status() != muster.Ready || n.scope.ViewHash() != out[0].scope.ViewHash() || len(n.scope.Members()) != len(out) {
				ready = false
			}
		}
		if !ready {
			if time.Now().After(deadline) {
				t.Fatal("scopes did not become ready")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return out
}

func publishSeqs(t *testing.T, n *natsPS, id string, from, to int64) {
	t.Helper()
	for s := from; s <= to; s++ {
		if err := n.ps.Publish(context.Background(), event(id, s)); err != nil {
			t.Fatal(err)
		}
	}
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// TestRoutingModesOverNATS runs the delivery guarantees under every
// PUBSUB_ROUTING on the real NATS server: a node whose JoinTopic returned
// gets every event published after it (readiness), in order and once
// (through the Sequencer), whichever node publishes; a node that does not
// hold the topic receives nothing under muster and subjects routing and
// every event under flood routing; under subjects routing a leave stops the
// topic's events at the node and a rejoin resumes them.
func TestRoutingModesOverNATS(t *testing.T) {
	for _, routing := range pubsub.Routings {
		t.Run(string(routing), func(t *testing.T) {
			nodes := startNATSNodes(t, routing, "a", "b", "c")
			a, b, c := nodes[0], nodes[1], nodes[2]
			const id = "rt1"
			topic := session.Topic(id)
			b.ps.JoinTopic(topic)
			c.ps.JoinTopic(topic)
			if routing == pubsub.RoutingMuster {
				// Muster's join returns once the router has the member;
				// routing is exact once every node agrees on the table.
				deadline := time.Now().Add(20 * time.Second)
				for !targetsAre(a.scope, topic, "b", "c") && !targetsAre(b.scope, topic, "b", "c") && !targetsAre(c.scope, topic, "b", "c") {
					if time.Now().After(deadline) {
						t.Fatal("the router never listed b and c")
					}
					time.Sleep(10 * time.Millisecond)
				}
			}

			const n = 40
			before := a.ps.Counts()
			publishSeqs(t, a, id, 1, n)
			for _, h := range []*natsPS{b, c} {
				if got := h.local.waitFor(t, h.name, topic, n); !slices.Equal(got, seqRange(1, n)) {
					t.Fatalf("%s got %v, want 1..%d once each, in order", h.name, got, n)
				}
			}
			if sent := a.ps.Counts().Sent - before.Sent; routing != pubsub.RoutingMuster && sent != n {
				t.Fatalf("origin published %d messages for %d events, want one each", sent, n)
			}

			// b publishes the next events: c gets them; a does not hold the
			// topic. Then b publishes a marker on a topic a holds (under
			// muster one b routes itself, so it goes straight to a): a's
			// messages from b arrive in order and one goroutine handles
			// them, so once a has the marker it has handled whatever b's
			// events brought it.
			marker := markerID(t, routing, b)
			a.ps.JoinTopic(session.Topic(marker))
			aRecv := a.ps.Counts().Received
			publishSeqs(t, b, id, n+1, 2*n)
			publishSeqs(t, b, marker, 1, 1)
			if got := c.local.waitFor(t, "c", topic, 2*n); !slices.Equal(got, seqRange(1, 2*n)) {
				t.Fatalf("c got %v, want 1..%d", got, 2*n)
			}
			a.local.waitFor(t, "a", session.Topic(marker), 1)
			recv := a.ps.Counts().Received - aRecv - 1 // the marker
			switch routing {
			case pubsub.RoutingFlood:
				if recv != n {
					t.Fatalf("flood: a received %d of b's %d events, want all", recv, n)
				}
			default:
				if recv != 0 {
					t.Fatalf("%s: a, holding no socket of the topic, received %d events", routing, recv)
				}
			}
			if routing != pubsub.RoutingSubjects {
				return
			}

			// Churn: c leaves; b's events stop reaching it (b's later event
			// on another topic c holds is the barrier: one publisher, one
			// server, one subscriber connection keep order). c rejoins and
			// gets what follows.
			other := session.Topic("rt2")
			c.ps.JoinTopic(other)
			c.ps.LeaveTopic(topic)
			cRecv := c.ps.Counts().Received
			publishSeqs(t, b, id, 2*n+1, 2*n+5)
			publishSeqs(t, b, "rt2", 1, 1)
			c.local.waitFor(t, "c", other, 1)
			if got := c.ps.Counts().Received - cRecv; got != 1 {
				t.Fatalf("after leaving, c received %d messages, want only the other topic's one", got)
			}
			c.ps.JoinTopic(topic)
			publishSeqs(t, b, id, 2*n+6, 2*n+6)
			got := c.local.waitFor(t, "c", topic, 2*n+1)
			if want := append(seqRange(1, 2*n), 2*n+6); !slices.Equal(got, want) {
				t.Fatalf("c after rejoin got %v, want %v", got, want)
			}
		})
	}
}

// markerID returns a session id whose topic n routes itself under muster
// routing (any id under the others).
func markerID(t *testing.T, routing pubsub.Routing, n *natsPS) string {
	t.Helper()
	for i := range 10000 {
		id := fmt.Sprintf("mk%d", i)
		if r := n.scope.Router(session.Topic(id)); routing != pubsub.RoutingMuster || (r.Status == muster.RouteOK && r.Node == n.name) {
			return id
		}
	}
	t.Fatalf("no topic routed by %s", n.name)
	return ""
}

func targetsAre(s *muster.Scope, topic string, want ...string) bool {
	nodes, ok := s.Targets(topic, s.ViewHash())
	if !ok {
		return false
	}
	slices.Sort(nodes)
	return slices.Equal(nodes, want)
}

// TestRoutedFanOutOutlivesCallerDeadline: the caller's context ends while
// the origin's local fan-out runs (a fan-out to many sockets can take
// longer than the session's store deadline); the other nodes still get the
// event, under every routing.
func TestRoutedFanOutOutlivesCallerDeadline(t *testing.T) {
	for _, routing := range pubsub.Routings {
		t.Run(string(routing), func(t *testing.T) {
			nodes := startNATSNodes(t, routing, "a", "b", "c")
			a, b, c := nodes[0], nodes[1], nodes[2]
			const id = "dl1"
			topic := session.Topic(id)
			for _, n := range nodes {
				n.ps.JoinTopic(topic)
			}
			if routing == pubsub.RoutingMuster {
				deadline := time.Now().Add(20 * time.Second)
				for !targetsAre(a.scope, topic, "a", "b", "c") && !targetsAre(b.scope, topic, "a", "b", "c") && !targetsAre(c.scope, topic, "a", "b", "c") {
					if time.Now().After(deadline) {
						t.Fatal("the router never listed a, b and c")
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			a.local.mu.Lock()
			a.local.onBroadcast = cancel // the deadline passes during the local fan-out
			a.local.mu.Unlock()
			for s := int64(1); s <= 3; s++ {
				if err := a.ps.Publish(ctx, event(id, s)); err != nil {
					t.Fatal(err)
				}
			}
			if ctx.Err() == nil {
				t.Fatal("the forced ordering did not run")
			}
			for _, h := range []*natsPS{b, c} {
				if got := h.local.waitFor(t, h.name, topic, 3); !slices.Equal(got, seqRange(1, 3)) {
					t.Fatalf("%s got %v, want 1..3", h.name, got)
				}
			}
			if e := a.ps.Counts().Errors; e != 0 {
				t.Fatalf("origin counted %d send errors", e)
			}
		})
	}
}

// BenchmarkTopicJoinLeave is the cost of a topic's first join and last leave
// on a node (the hub's hooks) under each routing, two nodes on the real
// NATS server: a Muster claim and release at the topic's router, a
// subject's SUB with its PING round trip and UNSUB, or nothing.
func BenchmarkTopicJoinLeave(b *testing.B) {
	for _, routing := range pubsub.Routings {
		b.Run(string(routing), func(b *testing.B) {
			nodes := startNATSNodes(b, routing, "a", "b")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				topic := session.Topic(fmt.Sprintf("jl%d", i))
				nodes[0].ps.JoinTopic(topic)
				nodes[0].ps.LeaveTopic(topic)
			}
			b.StopTimer()
			if e := nodes[0].ps.Counts().Errors; e != 0 {
				b.Fatalf("%d join/leave errors", e)
			}
		})
	}
}
