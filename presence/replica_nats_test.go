package presence_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/muster/natstransport"
	"github.com/relaygw/relay/presence"
)

// natsNode is a Census and a Replica on one node, over the real NATS.
type natsNode struct {
	c *presence.Census
	r *presence.Replica
}

// startNATSNodes starts Census+Replica nodes on their own NATS prefix, the
// Replica's broadcast period long enough that the test's own Flush calls
// are the ones that count.
func startNATSNodes(tb testing.TB, prefix string, names ...string) map[string]*natsNode {
	tb.Helper()
	out := map[string]*natsNode{}
	for _, name := range names {
		n := &natsNode{}
		n.r = presence.NewReplica(presence.ReplicaConfig{
			Transport:       natstransport.New(testenv.NATSConn(tb), natstransport.Config{Prefix: prefix, Scope: "presence", Node: name}),
			Incarnation:     func() uint64 { return n.c.Incarnation() },
			Peers:           func() map[string]uint64 { return n.c.Peers() },
			BroadcastPeriod: time.Hour,
			DigestInterval:  time.Hour,
		})
		n.c = presence.NewCensus(presence.CensusConfig{
			Transport:         natstransport.New(testenv.NATSConn(tb), natstransport.Config{Prefix: prefix, Scope: "census", Node: name}),
			BroadcastInterval: 100 * time.Millisecond,
			OnPeer: func(peer string, inc uint64, up bool) {
				if up {
					n.r.PeerUp(peer, inc)
				} else {
					n.r.PeerDown(peer, inc)
				}
			},
		})
		if err := n.c.Start(ctxT(tb)); err != nil {
			tb.Fatal(err)
		}
		if err := n.r.Start(ctxT(tb)); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(n.c.Stop)
		tb.Cleanup(n.r.Stop)
		out[name] = n
	}
	return out
}

// TestReplicaOverNATS: three nodes on the real NATS server list every
// node's presences, and a stopped node's presences leave the others.
func TestReplicaOverNATS(t *testing.T) {
	ns := startNATSNodes(t, testenv.NATSPrefix(t), "n1", "n2", "n3")
	eventually(t, func() error {
		for name, n := range ns {
			if len(n.c.Peers()) != 2 {
				return fmt.Errorf("%s registered %v", name, n.c.Peers())
			}
		}
		return nil
	})
	for name, n := range ns {
		n.r.Track("session:s", "u-"+name, nil)
		n.r.Flush()
	}
	counts := func(want int, names ...string) func() error {
		return func() error {
			for _, name := range names {
				if got := ns[name].r.Count("session:s"); got != want {
					return fmt.Errorf("%s counts %d, want %d", name, got, want)
				}
			}
			return nil
		}
	}
	eventually(t, counts(3, "n1", "n2", "n3"))
	ns["n3"].r.Stop()
	ns["n3"].c.Stop() // its bye: the others drop n3's presence
	eventually(t, counts(2, "n1", "n2"))
}

// natsCounter counts the messages published under subject and their bytes
// (subject, headers and payload as the client library sends them).
type natsCounter struct {
	msgs, bytes atomic.Int64
	nc          *nats.Conn
}

func countNATS(tb testing.TB, subject string) *natsCounter {
	c := &natsCounter{nc: testenv.NATSConn(tb)}
	_, err := c.nc.Subscribe(subject, func(m *nats.Msg) {
		c.msgs.Add(1)
		h := 0
		for k, vs := range m.Header {
			for _, v := range vs {
				h += len(k) + len(v) + 4
			}
		}
		if h > 0 {
			h += len("NATS/1.0\r\n\r\n")
		}
		c.bytes.Add(int64(len(m.Subject) + h + len(m.Data)))
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.nc.Flush(); err != nil {
		tb.Fatal(err)
	}
	return c
}

// BenchmarkReplicaJoin10k: the presence cost of joins on a topic with
// 10,000 presences spread over three nodes, on the real NATS server: the
// Replica messages a node publishes per join (each delivered to the two
// other nodes), and their bytes. "join" flushes after every join (one join
// per broadcast period, the most expensive case); "burst100" flushes after
// 100 joins (a busy topic, where one period carries many).
func BenchmarkReplicaJoin10k(b *testing.B) {
	prefix := testenv.NATSPrefix(b)
	ns := startNATSNodes(b, prefix, "n1", "n2", "n3")
	eventually(b, func() error {
		for name, n := range ns {
			if len(n.c.Peers()) != 2 {
				return fmt.Errorf("%s registered %v", name, n.c.Peers())
			}
		}
		return nil
	})
	const topic, viewers = "session:big", 10000
	var wg sync.WaitGroup
	for i, name := range []string{"n1", "n2", "n3"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := i; j < viewers; j += 3 {
				ns[name].r.Track(topic, fmt.Sprintf("user-%05d", j), map[string]any{"node": name, "online_at": 1764600000})
			}
			ns[name].r.Flush()
		}()
	}
	wg.Wait()
	total := viewers
	converge := func() {
		eventually(b, func() error {
			for name, n := range ns {
				if got := n.r.Count(topic); got != total {
					return fmt.Errorf("%s counts %d, want %d", name, got, total)
				}
			}
			return nil
		})
	}
	converge()
	for _, per := range []int{1, 100} {
		name := "join"
		if per > 1 {
			name = fmt.Sprintf("burst%d", per)
		}
		b.Run(name, func(b *testing.B) {
			cnt := countNATS(b, prefix+".presence.>")
			joins := 0
			b.ResetTimer()
			for i := range b.N {
				for j := range per {
					ns["n1"].r.Track(topic, fmt.Sprintf("new-%s-%d-%d", name, i, j), map[string]any{"node": "n1", "online_at": 1764600000})
				}
				ns["n1"].r.Flush()
				joins += per
			}
			b.StopTimer()
			total += joins
			converge()
			if err := cnt.nc.Flush(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(cnt.msgs.Load())/float64(joins), "nats_msgs/join")
			b.ReportMetric(float64(cnt.bytes.Load())/float64(joins), "nats_bytes/join")
			b.ReportMetric(0, "ns/op")
		})
	}
}
