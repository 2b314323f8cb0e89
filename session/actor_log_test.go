package session

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/internal/trace"
)

// A replay log that is down (Redis cut off) costs late joiners their replay,
// never the live stream: events are still published, turns still complete,
// and the failures are counted. Once Redis is back, appends land again.
func TestReplayLogOutageKeepsPublishing(t *testing.T) {
	addr, err := testenv.HostPort(testenv.RedisServerURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.Proxy(t, addr)
	opts, err := redis.ParseURL(proxy.URL(testenv.RedisServerURL()))
	if err != nil {
		t.Fatal(err)
	}
	opts.MaxRetries = -1
	client := redis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	prefix := testenv.RedisPrefix(t, client)

	st := memoryStores()
	st.log = clusterAdapters(t).ReplayLog(client, prefix, 1000, time.Hour)
	tr := trace.New()
	cfg, rec, _ := testConfig(st, "a/1", tr)
	cfg.StoreTimeout = 2 * time.Second
	m := startManager(t, cfg)

	submit(t, m, "s1", "before")
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 1)
	proxy.Cut()
	submit(t, m, "s1", "during outage")
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 2)
	if got := m.Stats().LogAppendErrors; got != 6 {
		t.Fatalf("%d append errors counted, want the 6 events of the second turn", got)
	}
	if n := len(rec.ofType(agent.TypeMessage)); n != 2 {
		t.Fatalf("%d messages published, want 2 (the outage must not stop the live stream)", n)
	}
	proxy.Restore()
	submit(t, m, "s1", "after")
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 3)

	logged := logEvents(t, st.log, "s1")
	assertIncreasing(t, logged)
	if len(logged) != 5+5 || logged[5].Seq != 12 {
		t.Fatalf("log holds %d events (%v), want the 5 before and the 5 after the outage", len(logged), types(logged))
	}
	if m.Stats().Fenced != 0 || len(m.Sessions()) != 1 {
		t.Fatalf("stats %+v sessions %+v", m.Stats(), m.Sessions())
	}
	assertIncreasing(t, rec.all())
	if n := len(rec.all()); n != 16 {
		t.Fatalf("published %d events, want 16", n)
	}
}
