package session

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/trace"
)

// A session that stood down after a failed end-of-turn write is not
// bricked: its events beyond the stored seq are in the log at its epoch, so
// a new actor at the same epoch would re-use their seqs and every append
// would come back fenced. The stood-down actor gives its lease up, and the
// next input runs at epoch+1 from the store (the stood-down turn's input
// first: it is still in the inbox).
func TestStandDownAfterCheckpointFailureReleasesLease(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, _, _ := testConfig(st, "a/1", tr)
	fs := &faultyStore{SessionStore: st.store}
	fs.complete.n.Store(1)
	cfg.Store = fs
	cfg.StoreAttempts = 1
	m := startManager(t, cfg)
	first := submit(t, m, "s1", "hello")
	waitFor(t, tr, trace.Kind("session.standdown", "session", "s1"), 1)
	waitGone(t, m, "s1")

	acc, err := m.Accept(context.Background(), "s1", textInput("again", ""))
	if err != nil {
		t.Fatalf("submit after the stand-down: %v\ntrace:\n%s", err, tr.Dump())
	}
	if acc.Epoch != first.Epoch+1 {
		t.Fatalf("accepted at %+v, want epoch %d", acc, first.Epoch+1)
	}
	waitFor(t, tr, trace.Kind("session.emit", "session", "s1", "type", agent.TypeTurnCompleted, "epoch", acc.Epoch), 2)
	if got := messages(state(t, m, "s1").History); !reflect.DeepEqual(got, []agent.Message{{Role: "user", Content: "hello"}, {Role: "assistant", Content: "hello"}, {Role: "user", Content: "again"}, {Role: "assistant", Content: "again"}}) {
		t.Fatalf("history = %v, want the stood-down turn re-run, then the new one", got)
	}
}

// An owner whose process was stopped past its lease's local deadline
// (here: the clock moves on while the renewer is parked, as a SIGSTOP
// would leave its timer unfired) appends and publishes nothing more: the
// turn's next delta is refused, the session stands down, and the replay
// log and the subscribers end before it.
func TestNothingPublishedPastLeaseDeadline(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, rec, clk := testConfig(st, "a/1", tr)
	ag := newBlockAgent()
	ag.post = "late"
	cfg.Agent = ag
	tr.Park(trace.Kind("renewer.armed", "owner", "a/1"), trace.Kind("session.lease.past_deadline", "owner", "a/1"))
	m := startManager(t, cfg)
	submit(t, m, "s1", "hello")
	<-ag.started
	// The renewer is parked at its first arming, its timer not yet fired.
	waitFor(t, tr, trace.Kind("renewer.armed", "owner", "a/1"), 1)
	clk.Advance(cfg.LeaseTTL + time.Second)
	close(ag.release)
	if err := <-ag.postErr; err == nil {
		t.Fatal("the delta past the lease deadline was emitted")
	}
	waitFor(t, tr, trace.Kind("session.standdown", "owner", "a/1"), 1)
	assertNoParkFailures(t, tr)
	if got := types(rec.all()); !reflect.DeepEqual(got, []string{agent.TypeUserEvent, agent.TypeTurnStarted}) {
		t.Fatalf("published %v, want nothing after turn_started", got)
	}
	if got := types(logEvents(t, st.log, "s1")); len(got) != 2 {
		t.Fatalf("logged %v, want nothing after turn_started", got)
	}
}
