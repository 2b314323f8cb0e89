package gateway

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/trace"
)

// getViewers reads GET /admin/viewers from srvURL.
func getViewers(t *testing.T, srvURL string) Viewers {
	t.Helper()
	req, _ := http.NewRequest("GET", srvURL+"/admin/viewers", nil)
	req.Header.Set("Authorization", "Bearer "+testAdmin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v Viewers
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /admin/viewers: %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// awaitCounts waits until node to has accepted counts from node from that
// from read after everything the test did so far: the second broadcast from
// emits after now started after the first one's trace point, so its counts
// were read after now.
func awaitCounts(t *testing.T, tr *trace.Tracer, from, to string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	evs := tr.Events()
	now := uint64(0)
	if len(evs) > 0 {
		now = evs[len(evs)-1].Seq
	}
	sent := trace.Kind("census.counts.sent", "node", from)
	first, err := tr.WaitAfter(ctx, now, sent)
	if err != nil {
		t.Fatal(err)
	}
	second, err := tr.WaitAfter(ctx, first.Seq, sent)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.WaitFor(ctx, trace.Kind("census.counts.accepted", "node", to, "from", from, "seq", second.Get("seq"))); err != nil {
		t.Fatalf("%s never accepted %s's counts #%v: %v\n%s", to, from, second.Get("seq"), err, tr.Dump())
	}
}

// TestViewersAcrossNodes: two nodes on real NATS, viewers on both. Each
// node's /admin/viewers lists its own sockets per session topic and the
// cluster-wide sum, and a socket that leaves drops out of both.
func TestViewersAcrossNodes(t *testing.T) {
	c := newTestCluster(t)
	fast := func(cfg *Config) { cfg.CensusInterval = 50 * time.Millisecond }
	_, srvA := c.addWith("a", nil, fast)
	_, srvB := c.addWith("b", nil, fast)
	tok := c.token()

	a1, a2 := phxtest.DialT(t, phxtest.URL(srvA.URL, tok)), phxtest.DialT(t, phxtest.URL(srvA.URL, tok))
	a1.Join("session:v1", map[string]any{})
	a2Ref := a2.Send("", "session:v1", "phx_join", map[string]any{})
	a2.Until(a2Ref)
	b1 := phxtest.DialT(t, phxtest.URL(srvB.URL, tok))
	b1.Join("session:v1", map[string]any{})
	b1.Join("session:v2", map[string]any{})

	awaitCounts(t, c.tr, "a", "b")
	awaitCounts(t, c.tr, "b", "a")
	cluster := map[string]int{"session:v1": 3, "session:v2": 1}
	for _, want := range []Viewers{
		{Node: "a", Local: map[string]int{"session:v1": 2}, Cluster: cluster, Peers: []string{"b"}},
		{Node: "b", Local: map[string]int{"session:v1": 1, "session:v2": 1}, Cluster: cluster, Peers: []string{"a"}},
	} {
		srv := srvA
		if want.Node == "b" {
			srv = srvB
		}
		assertViewers(t, getViewers(t, srv.URL), want)
	}

	// a2 leaves session:v1; once a's hub has dropped it, b hears of it.
	a2.Send(a2Ref, "session:v1", "phx_leave", map[string]any{})
	waitUntil(t, "a's hub drops the leaving socket", func() bool { return c.nodes[0].hub.Subscribers("session:v1") == 1 })
	awaitCounts(t, c.tr, "a", "b")
	assertViewers(t, getViewers(t, srvB.URL), Viewers{Node: "b", Local: map[string]int{"session:v1": 1, "session:v2": 1},
		Cluster: map[string]int{"session:v1": 2, "session:v2": 1}, Peers: []string{"a"}})
}

func assertViewers(t *testing.T, got, want Viewers) {
	t.Helper()
	if got.Node != want.Node || !maps.Equal(got.Local, want.Local) || !maps.Equal(got.Cluster, want.Cluster) || !slices.Equal(got.Peers, want.Peers) {
		t.Fatalf("viewers on %s = %+v, want %+v", want.Node, got, want)
	}
}

// TestViewersEmbedded: a single embedded node reports its own sockets as the
// cluster-wide count, with no peers.
func TestViewersEmbedded(t *testing.T) {
	n, srv, _ := testNode(t, nil)
	tok, _ := n.Auth().Mint("u", []string{"*"}, time.Hour)
	s := phxtest.DialT(t, phxtest.URL(srv.URL, tok))
	s.Join("session:e1", map[string]any{})
	assertViewers(t, getViewers(t, srv.URL), Viewers{Node: "n1", Local: map[string]int{"session:e1": 1},
		Cluster: map[string]int{"session:e1": 1}, Peers: []string{}})
}
