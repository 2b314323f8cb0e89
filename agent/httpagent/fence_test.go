package httpagent

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/session"
)

// frozenClock is a session Clock whose time never passes: a Manager on it
// never renews its lease nor reaches its local deadline, as an owner frozen
// mid-turn (a paused process, a partition).
type frozenClock struct{ now time.Time }

type frozenTimer struct{}

func (c frozenClock) Now() time.Time                     { return c.now }
func (frozenClock) NewTimer(time.Duration) session.Timer { return frozenTimer{} }
func (frozenTimer) C() <-chan time.Time                  { return nil }
func (frozenTimer) Stop() bool                           { return true }

// A fence cancels the turn and closes its request: owner A streams a turn
// whose lease lapses; owner B claims the session at the next epoch and
// resumes the turn (attempt 2, the partial text); A's next delta is fenced,
// A's turn stops, and the agent sees A's request closed. Clients get each
// word once; the reply is whole.
func TestFenceClosesRequest(t *testing.T) {
	forEachStores(t, testFenceClosesRequest)
}

func testFenceClosesRequest(t *testing.T, st *stores) {
	resumed := make(chan struct{})
	closedA := make(chan struct{})
	srv := newAgentServer(t, func(w http.ResponseWriter, r *http.Request, req Request) {
		if req.Resume == nil { // owner A's run
			sse(w, `{"type":"delta","data":{"text":"one "}}`)
			<-resumed // B has taken the turn over
			sse(w, `{"type":"delta","data":{"text":"stale "}}`)
			<-r.Context().Done()
			close(closedA)
			return
		}
		close(resumed)
		sse(w, `{"type":"delta","data":{"text":"two"}}`, `{"type":"done"}`)
	})
	newManager := func(owner string) *session.Manager {
		m := session.NewManager(session.Config{
			Owner: owner, Agent: session.StorableOutput(newAgent(t, srv.URL, nil)),
			Leases: st.leases, Store: st.store, Log: st.log, Publisher: st.rec,
			Clock: frozenClock{now: time.Unix(1_700_000_000, 0)},
		})
		t.Cleanup(m.Close)
		return m
	}
	a := newManager("a")
	post(t, a, "s1", "count")
	st.rec.waitEvents(t, "s1", func(evs []agent.Event) bool { return slices.Contains(types(evs), "delta") })

	st.advance(session.DefaultConfig().LeaseTTL + time.Second) // A's lease lapses
	b := newManager("b")
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if n, err := b.Recover(ctx, 10); err != nil || n != 1 {
		t.Fatalf("recover = %d, %v; want 1", n, err)
	}
	select {
	case <-closedA:
	case <-time.After(hangGuard):
		t.Fatal("hang guard: owner A's request was never closed")
	}
	evs := st.rec.waitEvents(t, "s1", turnsEnded(1))
	completedWith(t, evs, "one two")
	if got, want := types(evs), []string{"user_event", "turn_started", "delta", "turn_resumed", "delta", "message", "turn_completed"}; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v%s", got, want, summary(evs))
	}
}
