package muster_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/relaygw/relay/internal/testkit/mustertest"
	"github.com/relaygw/relay/internal/trace"
	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/muster/memnet"
	"github.com/relaygw/relay/muster/ring"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cluster is a set of Scopes on one memnet network.
type cluster struct {
	t     testing.TB
	net   *memnet.Network
	tr    *trace.Tracer
	nodes map[string]*muster.Scope
	mod   func(name string, c *muster.Config)
	mu    sync.Mutex
}

func newCluster(t testing.TB, seed int64) *cluster {
	c := &cluster{t: t, net: memnet.New(seed), tr: trace.New(), nodes: map[string]*muster.Scope{}}
	t.Cleanup(c.closeAll)
	return c
}

func (c *cluster) config(name string) muster.Config {
	cfg := mustertest.FastConfig()
	cfg.Node = name
	cfg.Transport = c.net.Transport(name)
	cfg.Tracer = c.tr
	// Incarnations must grow across restarts of a name, also past the
	// wall-clock incarnations a coordinator reset takes: use the default.
	cfg.Incarnation = 0
	if c.mod != nil {
		c.mod(name, &cfg)
	}
	return cfg
}

// add starts a node.
func (c *cluster) add(name string, mods ...func(*muster.Config)) *muster.Scope {
	c.t.Helper()
	cfg := c.config(name)
	for _, m := range mods {
		m(&cfg)
	}
	s, err := muster.New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	s.EnableHooks()
	if err := s.Start(context.Background()); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.nodes[name] = s
	c.mu.Unlock()
	return s
}

func (c *cluster) node(name string) *muster.Scope {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[name]
}

// stop kills a node and makes every survivor's failure detector declare it
// down at once.
func (c *cluster) stop(name string) {
	c.t.Helper()
	c.mu.Lock()
	s := c.nodes[name]
	delete(c.nodes, name)
	rest := make([]*muster.Scope, 0, len(c.nodes))
	for _, o := range c.nodes {
		rest = append(rest, o)
	}
	c.mu.Unlock()
	c.net.Kill(name)
	_ = s.Close()
	for _, o := range rest {
		o.ForceDown(name)
	}
}

func (c *cluster) closeAll() {
	c.mu.Lock()
	ns := c.nodes
	c.nodes = map[string]*muster.Scope{}
	c.mu.Unlock()
	for _, s := range ns {
		_ = s.Close()
	}
	c.net.Close()
	if c.tr == nil {
		return
	}
	if f := c.tr.Failures(); len(f) > 0 {
		c.t.Errorf("trace park failures: %v", f)
	}
}

func (c *cluster) all() []*muster.Scope {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*muster.Scope, 0, len(c.nodes))
	for _, s := range c.nodes {
		out = append(out, s)
	}
	return out
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitReady waits until every listed node is ready with members == names
// and the same view hash.
// It waits up to 60 s: a hang guard, not a bound (a node's failure detector
// runs on real time, and on a machine at load 20 convergence took over 20 s).
func (c *cluster) waitReady(names ...string) {
	c.t.Helper()
	want := slices.Clone(names)
	slices.Sort(want)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok := true
		var h uint64
		for i, n := range want {
			s := c.node(n)
			if s == nil || s.Status() != muster.Ready || !slices.Equal(s.Members(), want) {
				ok = false
				break
			}
			if i == 0 {
				h = s.ViewHash()
			} else if s.ViewHash() != h {
				ok = false
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			msg := ""
			for _, n := range want {
				if s := c.node(n); s != nil {
					msg += s.Dump().String()
				}
			}
			c.t.Fatalf("cluster %v not ready:\n%s", want, msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitSettled is waitReady plus: no listed node still owes a peer its
// snapshot round. Ready does not wait for the rounds that carried the view
// to be acknowledged (a node turns ready on agreed views while its round to
// a peer is still in flight), and a round that fails toward a member resets
// the coordinator, which fails a parked join with ErrRestarted. A test that
// kills a node and expects one specific error from work in flight starts
// from here, not from waitReady.
func (c *cluster) waitSettled(names ...string) {
	c.t.Helper()
	c.waitReady(names...)
	deadline := time.Now().Add(60 * time.Second) // a hang guard, as in waitReady
	for {
		var owed []string
		for _, n := range names {
			for _, o := range c.node(n).Owed() {
				owed = append(owed, n+"->"+o)
			}
		}
		if len(owed) == 0 {
			c.waitReady(names...)
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("cluster %v: snapshot rounds never acknowledged: %v", names, owed)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// groupRoutedTo finds a group name that routes to want under members, and
// (if alsoUnder is non-nil) to alsoWant under alsoUnder.
func groupRoutedTo(prefix string, members []string, want string, alsoUnder []string, alsoWant string) string {
	r1 := ring.New(members, 0)
	var r2 *ring.Ring
	if alsoUnder != nil {
		r2 = ring.New(alsoUnder, 0)
	}
	for i := 0; ; i++ {
		g := fmt.Sprintf("%s:%d", prefix, i)
		if r1.Find(g) != want {
			continue
		}
		if r2 != nil && r2.Find(g) != alsoWant {
			continue
		}
		return g
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitState waits until g is in state st on s.
func waitState(t testing.TB, s *muster.Scope, g string, st string) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%s: group %s in %s (is %s)", s.Node(), g, st, s.GroupState(g)), func() bool {
		return s.GroupState(g) == st
	})
}

// kindOf matches trace events of kind emitted on node.
func kindOf(kind, node string, kv ...any) trace.Matcher {
	return trace.Kind(kind, append([]any{"node", node}, kv...)...)
}

// withList narrows m to events whose field key is the string list want
// (trace.Kind compares with ==, which slices do not support).
func withList(m trace.Matcher, key string, want []string) trace.Matcher {
	return func(e trace.Event) bool {
		got, ok := e.Get(key).([]string)
		return m(e) && ok && slices.Equal(got, want)
	}
}

// mark returns the seq of the last trace event so far (for WaitAfter).
func (c *cluster) mark() uint64 {
	evs := c.tr.Events()
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Seq
}
