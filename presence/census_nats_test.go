package presence_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/muster/natstransport"
	"github.com/relaygw/relay/presence"
)

// TestCensusOverNATS: three nodes on the real NATS server agree on the
// cluster counts after their broadcasts, and a stopped node's counts leave.
func TestCensusOverNATS(t *testing.T) {
	prefix := testenv.NATSPrefix(t)
	const interval = 100 * time.Millisecond
	names := []string{"n1", "n2", "n3"}
	cs := map[string]*presence.Census{}
	for _, name := range names {
		c := presence.NewCensus(presence.CensusConfig{
			Transport:         natstransport.New(testenv.NATSConn(t), natstransport.Config{Prefix: prefix, Scope: "census", Node: name}),
			BroadcastInterval: interval,
		})
		if err := c.Start(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Stop)
		cs[name] = c
	}
	for i, name := range names {
		for range i + 1 {
			cs[name].Inc("room")
		}
		cs[name].Inc("only:" + name)
	}
	want := map[string]int{"room": 6, "only:n1": 1, "only:n2": 1, "only:n3": 1}
	agree := func(want map[string]int, names ...string) error {
		for _, name := range names {
			if got := cs[name].Counts(); !maps.Equal(got, want) {
				return fmt.Errorf("%s sees %v, want %v", name, got, want)
			}
		}
		return nil
	}
	eventually(t, func() error { return agree(want, names...) })

	cs["n3"].Stop()
	delete(want, "only:n3")
	want["room"] = 3
	eventually(t, func() error { return agree(want, "n1", "n2") })
}

// eventually polls cond until it returns nil or 10 s pass.
func eventually(t testing.TB, cond func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal(err)
		case <-tick.C:
		}
	}
}
