package chaos

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/testkit/proctest"
)

// TestPausedOwnerIsFencedAfterTakeover: the owner is frozen (SIGSTOP)
// mid-turn for longer than its lease; another node takes the session over
// at epoch+1; then the frozen node runs again (SIGCONT). It must stand the
// session down without writing or publishing anything more: the history
// stays the new owner's (which ran the paused input again from its inbox),
// the replay log gains nothing at the old epoch, and a socket on a third
// node sees only the new owner's epoch from its first event on.
func TestPausedOwnerIsFencedAfterTakeover(t *testing.T) {
	c := newCluster(t, map[string]string{"ECHO_DELAY": "150ms"})
	a, b, cc := c.Start("a", nil), c.Start("b", nil), c.Start("c", nil)
	const id = "paused-owner"

	obs := joinObserver(t, c, cc, id)
	old := mustAccept(t, c, a, id, proctest.Event{Text: words("P", 40), Key: "k-paused"})
	waitLogged(t, c, id, "the paused turn's third word", isDelta("P3"))
	aOwner := readRow(t, c, id).Owner

	if err := a.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	oldEvents := countEpoch(replayLog(t, c, id), old.Epoch)

	// The first post meets a live lease held by a frozen node: the forward
	// times out (the event may have been accepted there), so the client
	// cannot follow a directive yet; after the lease lapses the same event,
	// re-sent, is taken over by b.
	r := post(t, c, b, id, proctest.Event{Text: "new owner turn", Key: "k-new"})
	if r.Status != http.StatusGatewayTimeout || r.Code != "forward_timeout" {
		t.Fatalf("post while the owner is frozen: %v, want 504 forward_timeout", r)
	}
	out := c.Client().Deliver(timeout(t, 20*time.Second), func(int) string { return b.URL() }, id,
		proctest.Event{Text: "new owner turn", Key: "k-new"})
	if out.Err != nil || out.Accepted.Epoch != old.Epoch+1 || out.Accepted.Duplicate {
		t.Fatalf("takeover: %v %+v", out.Err, out.Accepted)
	}
	if row := readRow(t, c, id); row.Owner == aOwner || row.Epoch != old.Epoch+1 || row.CheckpointEpoch != old.Epoch+1 {
		t.Fatalf("after takeover the rows are %+v", row)
	}
	t.Logf("taken over %v after SIGSTOP", time.Since(paused).Round(time.Millisecond))

	from := a.Logs().Len()
	if err := a.Resume(); err != nil {
		t.Fatal(err)
	}
	line, err := a.Logs().WaitFor(timeout(t, 15*time.Second), from, proctest.Msg("session stood down", "session", id))
	if err != nil {
		t.Fatal(err)
	}
	e, _ := proctest.ParseEntry(line)
	cause := e.Str("error")
	if !strings.Contains(cause, "fenced") && !strings.Contains(cause, "lease") {
		t.Errorf("stood down for %q, want a fence or a lost lease", cause)
	}
	t.Logf("resumed owner stood down: %s", cause)

	// b's turn completes; a wrote and published nothing more.
	view := waitView(t, c, b, id, "the new owner's turn", turnsDone(1))
	if view.Epoch != old.Epoch+1 {
		t.Errorf("view epoch %d, want %d", view.Epoch, old.Epoch+1)
	}
	row := readRow(t, c, id)
	// The paused turn's input was durable before its 202, so b ran it again
	// from the inbox: its user message and its reply are in the history once
	// each, both written at b's epoch; a added nothing.
	if row.CheckpointEpoch != old.Epoch+1 || strings.Count(row.Checkpoint, "P40") != 2 {
		t.Errorf("history after the resume: epoch %d %s; want the paused turn once (its message and reply), at epoch %d", row.CheckpointEpoch, row.Checkpoint, old.Epoch+1)
	}
	if n := countEpoch(replayLog(t, c, id), old.Epoch); n != oldEvents {
		t.Errorf("the replay log holds %d events of epoch %d after the resume, %d before", n, old.Epoch, oldEvents)
	}
	ctx := timeout(t, 20*time.Second)
	if _, err := obs.WaitEvent(ctx, func(ev phxtest.SessionEvent) bool {
		return ev.Epoch == old.Epoch+1 && ev.Type == agent.TypeTurnCompleted
	}); err != nil {
		t.Fatalf("observer never saw the new owner's turn complete: %v", err)
	}
	// One more turn after the resume, then everything queued so far.
	mustAccept(t, c, b, id, proctest.Event{Text: "after resume", Key: "k-after"})
	if _, err := obs.WaitEvent(ctx, func(ev phxtest.SessionEvent) bool {
		return ev.Type == agent.TypeUserEvent && userEventText(ev.Data) == "after resume"
	}); err != nil {
		t.Fatal(err)
	}
	if err := obs.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	checkSocketEpochs(t, obs.Events(), old.Epoch+1)
	info, err := c.Client().AdminNode(ctx, a.URL())
	if err != nil {
		t.Fatal(err)
	}
	if info.Sessions != 0 {
		t.Errorf("the fenced node still runs %d sessions", info.Sessions)
	}
}

// countEpoch counts the events of one epoch.
func countEpoch(evs []agent.Event, epoch int64) int {
	n := 0
	for _, ev := range evs {
		if ev.Epoch == epoch {
			n++
		}
	}
	return n
}
