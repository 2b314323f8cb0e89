package session

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/trace"
)

// Accepted inputs queued behind a running turn are bounded by MaxPending.
// Without a bound a client posting faster than turns run grew the queue
// (and every checkpoint, which holds it) without limit; past the bound the
// answer is ErrBusy, and an idempotent retry of an accepted input is still
// recognised.
func TestPendingInputsBounded(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, _, _ := testConfig(st, "a/1", tr)
	ag := newBlockAgent()
	cfg.Agent = ag
	cfg.MaxPending = 3
	m := startManager(t, cfg)
	ctx := context.Background()

	submit(t, m, "s1", "first") // runs at once and blocks in the agent
	<-ag.started
	var keyed Accepted
	for i := range cfg.MaxPending {
		acc, err := m.Accept(ctx, "s1", textInput(fmt.Sprint("queued ", i), fmt.Sprint("k", i)))
		if err != nil {
			t.Fatalf("queued input %d: %v", i, err)
		}
		if i == 0 {
			keyed = acc
		}
	}
	if _, err := m.Accept(ctx, "s1", textInput("one too many", "")); !errors.Is(err, ErrBusy) {
		t.Fatalf("submit past MaxPending = %v, want ErrBusy", err)
	}
	dup, err := m.Accept(ctx, "s1", textInput("queued 0", "k0"))
	if err != nil || !dup.Duplicate || dup.Seq != keyed.Seq {
		t.Fatalf("idempotent retry with a full queue = %+v, %v; want duplicate of %+v", dup, err, keyed)
	}
	if info := m.Sessions(); len(info) != 1 || info[0].Pending != cfg.MaxPending {
		t.Fatalf("sessions = %+v, want %d pending", info, cfg.MaxPending)
	}
	close(ag.release)
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 1+cfg.MaxPending)
	if n := len(logEventsOfType(t, st.log, "s1", agent.TypeUserEvent)); n != 1+cfg.MaxPending {
		t.Fatalf("%d inputs accepted, want %d", n, 1+cfg.MaxPending)
	}
	// With the queue drained, input is accepted again.
	submit(t, m, "s1", "later")
}
