package pubsub_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/trace"
	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/muster/memnet"
	"github.com/relaygw/relay/pubsub"
	"github.com/relaygw/relay/session"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const scopeName = "sessions"

// broadcast is one call of Local.Broadcast.
type broadcast struct {
	topic, event string
	payload      json.RawMessage
	meta         any
	sentBefore   int64 // the node's Counts().Sent when the call was made
}

// recorder is a node's Local: it records every Broadcast and takes it
// (returns 1) when the node holds the topic.
type recorder struct {
	node *node
	mu   sync.Mutex
	got  []broadcast
}

func (r *recorder) Broadcast(topic, event string, payload json.RawMessage, meta any) int {
	b := broadcast{topic: topic, event: event, payload: payload, meta: meta, sentBefore: r.node.ps.Counts().Sent}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, b)
	return 1
}

func (r *recorder) calls() []broadcast {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// node is one PubSub with its own Muster scope.
type node struct {
	name  string
	scope *muster.Scope
	tr    *memnet.Transport // pubsub's transport
	ps    *pubsub.PubSub
	local *recorder
	reg   *prometheus.Registry
	logs  *observer.ObservedLogs
}

// cluster is nodes whose Muster scopes share one memnet network and whose
// PubSubs share another, as a gateway runs them (two scopes).
type cluster struct {
	t                *testing.T
	musterNet, psNet *memnet.Network
	tr               *trace.Tracer
	nodes            []*node
}

func newCluster(t *testing.T, names ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, musterNet: memnet.New(1), psNet: memnet.New(2), tr: trace.New()}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			_ = n.scope.Close()
			_ = n.tr.Close()
		}
		c.musterNet.Close()
		c.psNet.Close()
		if f := c.tr.Failures(); len(f) != 0 {
			t.Errorf("trace park failures: %v", f)
		}
	})
	for _, name := range names {
		c.add(name)
	}
	return c
}

func (c *cluster) add(name string) *node {
	c.t.Helper()
	scope, err := muster.New(muster.Config{
		Name: scopeName, Node: name, Transport: c.musterNet.Transport(name), Tracer: c.tr, Shards: 2,
		ViewHeartbeat: 100 * time.Millisecond, PingInterval: 50 * time.Millisecond, PeerDownAfter: 3 * time.Second,
		RPCTimeout: time.Second, GatherTimeout: 5 * time.Second, Cooldown: 50 * time.Millisecond,
		VacantFlush: time.Hour, TombstoneWindow: time.Hour, SingletonPromotion: 100 * time.Millisecond,
		AntiEntropy: -1, DrainSettle: 10 * time.Millisecond,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	if err := scope.Start(context.Background()); err != nil {
		c.t.Fatal(err)
	}
	core, logs := observer.New(zap.DebugLevel)
	n := &node{name: name, scope: scope, tr: c.psNet.Transport(name), reg: prometheus.NewRegistry(), logs: logs}
	n.local = &recorder{node: n}
	n.ps = pubsub.New(pubsub.Config{Node: name, Scope: scope, Transport: n.tr, Local: n.local,
		Metrics: pubsub.NewMetrics(n.reg), Logger: zap.New(core, zap.WithClock(stoppedClock{}))})
	n.tr.Register(n.ps)
	if err := n.tr.Start(context.Background()); err != nil {
		c.t.Fatal(err)
	}
	c.nodes = append(c.nodes, n)
	return n
}

func (c *cluster) node(name string) *node {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	c.t.Fatalf("no node %s", name)
	return nil
}

// waitReady waits until every node's scope is ready with one view hash and
// a view of all the nodes.
func (c *cluster) waitReady() {
	c.t.Helper()
	var want []string
	for _, n := range c.nodes {
		want = append(want, n.name)
	}
	slices.Sort(want)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for _, n := range c.nodes {
			if n.scope.Status() != muster.Ready || n.scope.ViewHash() != c.nodes[0].scope.ViewHash() || !slices.Equal(n.scope.Members(), want) {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("nodes %v did not become ready", want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// quiesce waits until no pubsub message is in flight.
func (c *cluster) quiesce() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.psNet.Quiesce(ctx); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) counts() map[string]pubsub.Counts {
	out := map[string]pubsub.Counts{}
	for _, n := range c.nodes {
		out[n.name] = n.ps.Counts()
	}
	return out
}

// topicRoutedTo returns a session id whose topic's router is node.
func (c *cluster) topicRoutedTo(router string) string {
	c.t.Helper()
	for i := range 10000 {
		id := "s" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676%26))
		if r := c.nodes[0].scope.Router(session.Topic(id)); r.Status == muster.RouteOK && r.Node == router {
			return id
		}
	}
	c.t.Fatalf("no topic routed to %s", router)
	return ""
}

func event(id string, seq int64) agent.Event {
	return agent.Event{Session: id, Epoch: 1, Seq: seq, Type: agent.TypeDelta,
		Data: json.RawMessage(`{"text":"w"}`), At: time.Unix(1700000000, 0).UTC()}
}

// counter reads a counter (summed over labels matching op when given) from
// a node's registry.
func counter(t *testing.T, n *node, name, op string) float64 {
	t.Helper()
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := op == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == op {
					match = true
				}
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// stoppedClock stamps every log entry with one instant, so the Warn sampler
// (one line per message per second) sees every failure inside one second.
type stoppedClock struct{}

func (stoppedClock) Now() time.Time                         { return time.Unix(1700000000, 0) }
func (stoppedClock) NewTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }
