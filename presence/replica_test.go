package presence_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/presence"
)

// qnet is an in-test network whose messages wait in a queue until the test
// delivers (or drops) them, in any order it picks.
type qnet struct {
	mu    sync.Mutex
	nodes map[string]muster.Handler
	names []string
	queue []qmsg
}

type qmsg struct {
	from, to string
	b        []byte
}

type qtr struct {
	n    *qnet
	self string
}

func (t *qtr) Self() string { return t.self }
func (t *qtr) Register(h muster.Handler) {
	t.n.mu.Lock()
	defer t.n.mu.Unlock()
	t.n.nodes[t.self] = h
}
func (t *qtr) Start(context.Context) error { return nil }
func (t *qtr) Broadcast(_ context.Context, b []byte) error {
	t.n.mu.Lock()
	defer t.n.mu.Unlock()
	for _, to := range t.n.names {
		if to != t.self {
			t.n.queue = append(t.n.queue, qmsg{t.self, to, slices.Clone(b)})
		}
	}
	return nil
}
func (t *qtr) Send(_ context.Context, to string, b []byte) error {
	t.n.mu.Lock()
	defer t.n.mu.Unlock()
	t.n.queue = append(t.n.queue, qmsg{t.self, to, slices.Clone(b)})
	return nil
}
func (t *qtr) Call(context.Context, string, []byte) ([]byte, error) {
	return nil, muster.ErrNoResponders
}
func (t *qtr) Close() error { return nil }

// take removes message i from the queue.
func (n *qnet) take(i int) qmsg {
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.queue[i]
	n.queue = slices.Delete(n.queue, i, i+1)
	return m
}

func (n *qnet) len() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.queue)
}

func (n *qnet) deliver(m qmsg) {
	n.mu.Lock()
	h := n.nodes[m.to]
	n.mu.Unlock()
	h.HandleMessage(m.from, m.b)
}

// drain delivers every queued message, and those they cause, in order.
func (n *qnet) drain() {
	for n.len() > 0 {
		n.deliver(n.take(0))
	}
}

// viewer is one socket subscribed to a topic on one node, applying what
// the Replica broadcasts as phoenix.js's Presence does (docs/PHOENIX.md
// §5.2). In the served-state test it joins at some moment: it subscribes to
// the topic's broadcasts, then is served the topic's presence_state (and,
// when counted, presence_count), in the gateway's order
// (sessionChannel.Join). A diff lacking joins or leaves, or one that comes
// while counting, fails the test.
type viewer struct {
	name    string
	topic   string
	refs    map[string]string // phx_ref → key
	count   int
	counted bool // last told counts (presence_state {} then presence_count)
}

func (o *viewer) apply(t fataler, event string, payload json.RawMessage) {
	switch event {
	case "presence_state":
		var p wirePresences
		if err := json.Unmarshal(payload, &p); err != nil {
			t.Fatal(err)
		}
		o.refs, o.counted = map[string]string{}, false
		for k, e := range p {
			for _, r := range refs(e.Metas) {
				o.refs[r] = k
			}
		}
	case "presence_diff":
		if o.counted {
			t.Fatalf("%s: presence_diff %s while counting", o.name, payload)
		}
		// phoenix.js syncDiff: the joins, then the leaves.
		var d struct{ Joins, Leaves *wirePresences }
		if err := json.Unmarshal(payload, &d); err != nil {
			t.Fatal(err)
		}
		if d.Joins == nil || d.Leaves == nil {
			t.Fatalf("%s: presence_diff %s lacks joins or leaves", o.name, payload)
		}
		for k, e := range *d.Joins {
			for _, r := range refs(e.Metas) {
				o.refs[r] = k
			}
		}
		for _, e := range *d.Leaves {
			for _, r := range refs(e.Metas) {
				delete(o.refs, r)
			}
		}
	case "presence_count":
		var c struct{ Count int }
		if err := json.Unmarshal(payload, &c); err != nil {
			t.Fatal(err)
		}
		o.count, o.counted = c.Count, true
	default:
		t.Fatalf("unexpected event %s", event)
	}
}

// fataler is what testing.TB and *rapid.T share.
type fataler interface {
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

type repNode struct {
	name    string
	inc     uint64
	r       *presence.Replica
	viewers map[string]*viewer // by topic
}

type cluster struct {
	net   *qnet
	nodes []*repNode
	incs  map[string]uint64
	mu    sync.Mutex
}

func newRepCluster(t testing.TB, names []string, maxListed int) *cluster {
	c := &cluster{net: &qnet{nodes: map[string]muster.Handler{}, names: names}, incs: map[string]uint64{}}
	for i, name := range names {
		c.incs[name] = uint64(100 + i)
	}
	for _, name := range names {
		n := &repNode{name: name, inc: c.incs[name], viewers: map[string]*viewer{}}
		n.r = presence.NewReplica(presence.ReplicaConfig{
			Transport:   &qtr{c.net, name},
			Incarnation: func() uint64 { c.mu.Lock(); defer c.mu.Unlock(); return c.incs[name] },
			Peers: func() map[string]uint64 {
				c.mu.Lock()
				defer c.mu.Unlock()
				out := maps.Clone(c.incs)
				delete(out, name)
				return out
			},
			MaxListed: maxListed,
			OnBroadcast: func(topic, event string, payload json.RawMessage) {
				v := n.viewers[topic]
				if v == nil {
					v = &viewer{refs: map[string]string{}}
					n.viewers[topic] = v
				}
				v.apply(t, event, payload)
			},
		})
		if err := n.r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.r.Stop)
		c.nodes = append(c.nodes, n)
	}
	c.net.drain()
	return c
}

// listRefs is node n's presence_state of topic as phx_ref → key.
func listRefs(t fataler, r *presence.Replica, topic string) map[string]string {
	st, _ := r.List(topic)
	var p wirePresences
	if err := json.Unmarshal(st, &p); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, e := range p {
		for _, ref := range refs(e.Metas) {
			out[ref] = k
		}
	}
	return out
}

// TestReplicaConverges: for any interleaving of Track, Untrack, flushes,
// digests, and delivery of the resulting deltas, states and wants in any
// order, with some messages lost, every node ends (after one more flush and
// digest round) listing exactly the presences tracked cluster-wide, and
// every node's subscribers, applying only what was broadcast to them, list
// the same.
func TestReplicaConverges(t *testing.T) {
	topics := []string{"session:a", "session:b"}
	rapid.Check(t, func(rt *rapid.T) {
		c := newRepCluster(t, []string{"n1", "n2", "n3"}, -1)
		type live struct {
			node  int
			topic string
			ref   string
			key   string
		}
		var lives []live
		for i := range rapid.IntRange(1, 60).Draw(rt, "steps") {
			switch op := rapid.IntRange(0, 9).Draw(rt, "op"); {
			case op <= 2:
				ni := rapid.IntRange(0, 2).Draw(rt, "node")
				topic := rapid.SampledFrom(topics).Draw(rt, "topic")
				key := rapid.SampledFrom([]string{"alice", "bob"}).Draw(rt, "key")
				ref := c.nodes[ni].r.Track(topic, key, map[string]any{"i": i})
				lives = append(lives, live{ni, topic, ref, key})
			case op == 3 && len(lives) > 0:
				j := rapid.IntRange(0, len(lives)-1).Draw(rt, "untrack")
				l := lives[j]
				if !c.nodes[l.node].r.Untrack(l.topic, l.ref) {
					rt.Fatalf("untrack of live %s failed", l.ref)
				}
				lives = slices.Delete(lives, j, j+1)
			case op == 4:
				c.nodes[rapid.IntRange(0, 2).Draw(rt, "flush")].r.Flush()
			case op == 5:
				c.nodes[rapid.IntRange(0, 2).Draw(rt, "digest")].r.SendDigest()
			case op <= 8 && c.net.len() > 0:
				m := c.net.take(rapid.IntRange(0, c.net.len()-1).Draw(rt, "deliver"))
				c.net.deliver(m)
			case c.net.len() > 0:
				c.net.take(rapid.IntRange(0, c.net.len()-1).Draw(rt, "drop"))
			}
		}
		// Settle: deliver what is queued, then one flush and one digest
		// round with nothing lost.
		c.net.drain()
		for _, n := range c.nodes {
			n.r.Flush()
		}
		c.net.drain()
		for _, n := range c.nodes {
			n.r.SendDigest()
		}
		c.net.drain()
		for _, n := range c.nodes {
			n.r.Flush()
		}
		for _, topic := range topics {
			want := map[string]string{}
			for _, l := range lives {
				if l.topic == topic {
					want[l.ref] = l.key
				}
			}
			for _, n := range c.nodes {
				if got := listRefs(rt, n.r, topic); !maps.Equal(got, want) {
					rt.Fatalf("%s lists %v on %s, want %v", n.name, got, topic, want)
				}
				v := n.viewers[topic]
				if v == nil {
					v = &viewer{refs: map[string]string{}}
				}
				if !maps.Equal(v.refs, want) {
					rt.Fatalf("%s's subscribers of %s list %v, want %v", n.name, topic, v.refs, want)
				}
			}
		}
	})
}

// TestReplicaDropsDepartedNode: a node declared dead (PeerDown) has every
// presence dropped at once, its subscribers are told they left, and its late
// messages are ignored; its next incarnation's presences come back through
// PeerUp's state transfer.
func TestReplicaDropsDepartedNode(t *testing.T) {
	c := newRepCluster(t, []string{"n1", "n2"}, -1)
	n1, n2 := c.nodes[0], c.nodes[1]
	n2.r.Track("session:x", "bob", nil)
	n1.r.Track("session:x", "alice", nil)
	n1.r.Flush()
	n2.r.Flush()
	c.net.drain()
	n1.r.Flush()
	if got := listRefs(t, n1.r, "session:x"); len(got) != 2 || len(n1.viewers["session:x"].refs) != 2 {
		t.Fatalf("n1 lists %v, subscribers %v", got, n1.viewers["session:x"].refs)
	}
	// n2 tracks more, but its delta is held while n1 declares it dead.
	n2.r.Track("session:x", "carol", nil)
	n2.r.Flush()
	late := c.net.take(0)
	n1.r.PeerDown("n2", n2.inc)
	c.net.deliver(late)
	n1.r.Flush()
	if got := listRefs(t, n1.r, "session:x"); len(got) != 1 || len(n1.viewers["session:x"].refs) != 1 {
		t.Fatalf("after n2 died n1 lists %v, subscribers %v", got, n1.viewers["session:x"].refs)
	}
	// n2 comes back as a new incarnation; PeerUp brings its presences back.
	c.mu.Lock()
	c.incs["n2"]++
	c.mu.Unlock()
	n1.r.PeerUp("n2", c.incs["n2"])
	c.net.drain()
	n1.r.Flush()
	if got := listRefs(t, n1.r, "session:x"); len(got) != 3 || len(n1.viewers["session:x"].refs) != 3 {
		t.Fatalf("after n2's restart n1 lists %v, subscribers %v", got, n1.viewers["session:x"].refs)
	}
}

// TestReplicaCountsAboveMaxListed: above MaxListed a topic's subscribers
// get presence_state {} and presence_count, and get the list back below it.
func TestReplicaCountsAboveMaxListed(t *testing.T) {
	c := newRepCluster(t, []string{"n1", "n2"}, 2)
	n1, n2 := c.nodes[0], c.nodes[1]
	var refs []string
	for i := range 3 {
		refs = append(refs, n2.r.Track("session:big", fmt.Sprint("u", i), nil))
	}
	n2.r.Flush()
	c.net.drain()
	n1.r.Flush()
	v := n1.viewers["session:big"]
	if st, counted := n1.r.List("session:big"); !counted || string(st) != "{}" || v.count != 3 || len(v.refs) != 0 {
		t.Fatalf("over the limit: List %s counted %v, subscribers %+v", st, counted, v)
	}
	n2.r.Untrack("session:big", refs[0])
	n2.r.Flush()
	c.net.drain()
	n1.r.Flush()
	if len(v.refs) != 2 || n1.r.Count("session:big") != 2 {
		t.Fatalf("back under the limit, subscribers list %v", v.refs)
	}
}

// TestReplicaStateInParts: a topic's state larger than one message goes in
// parts and replaces the replica only once every part is in.
func TestReplicaStateInParts(t *testing.T) {
	c := newRepCluster(t, []string{"n1", "n2"}, -1)
	n1, n2 := c.nodes[0], c.nodes[1]
	for i := range 1200 {
		n2.r.Track("session:p", fmt.Sprint("u", i), nil)
	}
	n2.r.Flush()
	c.net.take(0) // the delta is lost
	n2.r.SendDigest()
	c.net.drain() // digest → want → state in 3 parts
	if got := n1.r.Count("session:p"); got != 1200 {
		t.Fatalf("n1 counts %d after the state transfer, want 1200", got)
	}
}

// TestReplicaIgnoresUnknownPeer: presences from a node or incarnation that
// Census does not list are ignored.
func TestReplicaIgnoresUnknownPeer(t *testing.T) {
	c := newRepCluster(t, []string{"n1", "n2"}, -1)
	delta := presence.EncodeDelta(999, "session:z", 0, 1, "mallory", "R1")
	c.net.nodes["n1"].HandleMessage("n2", delta)
	c.net.nodes["n1"].HandleMessage("n9", presence.EncodeDelta(100, "session:z", 0, 1, "mallory", "R1"))
	if n := c.nodes[0].r.Count("session:z"); n != 0 {
		t.Fatalf("%d presences accepted from unknown peers", n)
	}
}

// FuzzReplicaDecode: a replica message that decodes re-encodes to one that
// decodes to the same message, and applying any input never panics.
func FuzzReplicaDecode(f *testing.F) {
	f.Add(presence.EncodeDelta(100, "session:a", 0, 1, "alice", "R1"))
	f.Add([]byte(`{"k":"state","inc":5,"t":[{"t":"s","c":2,"part":1,"parts":2,"j":[{"k":"a","r":"x","m":{"phx_ref":"x"}}]}]}`))
	f.Add([]byte(`{"k":"digest","inc":5,"g":9,"d":{"s":3}}`))
	f.Add([]byte(`{"k":"want","inc":5,"all":true}`))
	f.Add([]byte(`{"k":"want","inc":5,"w":["s"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c := newRepCluster(t, []string{"n1", "n2"}, -1)
		c.nodes[1].r.Track("session:a", "bob", nil)
		c.nodes[1].r.Flush()
		c.net.drain()
		again, ok := presence.ReplicaRoundTrip(b)
		if ok {
			again2, ok2 := presence.ReplicaRoundTrip(again)
			if !ok2 || string(again2) != string(again) {
				t.Fatalf("accepted %q, re-encoded %q does not round-trip (%q)", b, again, again2)
			}
		}
		c.net.nodes["n1"].HandleMessage("n2", b)
		c.net.nodes["n2"].HandleMessage("n1", b)
		c.net.drain()
		c.nodes[0].r.Flush()
		if _, ok := presence.ReplicaRoundTrip(b); !ok && c.nodes[0].r.Count("session:a") != 1 {
			t.Fatalf("a refused message changed n1's presences: %d", c.nodes[0].r.Count("session:a"))
		}
	})
}

// BenchmarkReplicaMemory: heap held per presence, on the node that tracks it
// and on one node that replicates it (10,000 presences of one topic, the
// gateway's meta).
func BenchmarkReplicaMemory(b *testing.B) {
	for range b.N {
		c := newRepCluster(b, []string{"n1", "n2"}, -1)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range 10000 {
			c.nodes[1].r.Track("session:m", fmt.Sprintf("user-%05d", i), map[string]any{"node": "n2", "online_at": 1764600000})
		}
		c.nodes[1].r.Flush()
		c.net.drain()
		c.nodes[0].r.Flush()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if n := c.nodes[0].r.Count("session:m"); n != 10000 {
			b.Fatalf("replicated %d", n)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/10000, "heap_bytes/presence(origin+replica)")
		b.ReportMetric(0, "ns/op")
	}
}

// TestReplicaBigPeriodSentAsState: a period with more changes of a topic
// than one message carries sends the topic's state in parts instead of a
// delta, and peers follow without asking.
func TestReplicaBigPeriodSentAsState(t *testing.T) {
	c := newRepCluster(t, []string{"n1", "n2"}, -1)
	n1, n2 := c.nodes[0], c.nodes[1]
	var refs []string
	for i := range 1200 {
		refs = append(refs, n2.r.Track("session:big", fmt.Sprint("u", i), nil))
	}
	n2.r.Flush()
	if q := c.net.len(); q != 3 {
		t.Fatalf("%d messages for 1200 joins, want 3 state parts", q)
	}
	c.net.drain()
	if got := n1.r.Count("session:big"); got != 1200 {
		t.Fatalf("n1 counts %d, want 1200", got)
	}
	for _, r := range refs[:700] {
		n2.r.Untrack("session:big", r)
	}
	n2.r.Track("session:big", "late", nil)
	n2.r.Flush()
	c.net.drain()
	n1.r.Flush()
	if got := listRefs(t, n1.r, "session:big"); len(got) != 501 || got[refs[0]] != "" || got[refs[700]] == "" {
		t.Fatalf("n1 lists %d after 700 leaves and a join, want 501", len(got))
	}
	if v := n1.viewers["session:big"]; len(v.refs) != 501 {
		t.Fatalf("n1's subscribers list %d, want 501", len(v.refs))
	}
}
