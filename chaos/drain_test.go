package chaos

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/testkit/proctest"
)

// waitClosed reads s until the node closes it and returns the close code.
func waitClosed(t *testing.T, s *phxtest.Socket) websocket.StatusCode {
	t.Helper()
	ctx := timeout(t, 15*time.Second)
	for {
		if _, err := s.Read(ctx); err != nil {
			return websocket.CloseStatus(err)
		}
	}
}

// TestSIGTERMDrain: on SIGTERM readiness goes false first (while the node
// still holds a lease for a running turn), events are refused with a
// retry directive, the running turn finishes, every lease is handed back
// (the next claim elsewhere succeeds at once, at epoch+1), sockets are
// closed with 1012 and the process exits 0 without logging that the drain
// was cut short by DRAIN_WINDOW (the node times its own window; how long
// the exit took is logged as a figure).
func TestSIGTERMDrain(t *testing.T) {
	c := newCluster(t, map[string]string{"ECHO_DELAY": "100ms", "DRAIN_WINDOW": "4s"})
	a, b := c.Start("a", nil), c.Start("b", nil)
	window := c.Duration("DRAIN_WINDOW")
	const busy, idle = "drain-busy", "drain-idle"
	idleAcc := mustAccept(t, c, a, idle, proctest.Event{Text: "idle", Key: "k-idle"})
	waitView(t, c, a, idle, "the idle session's turn", turnsDone(1))
	sock := joinObserver(t, c, a, busy)
	busyAcc := mustAccept(t, c, a, busy, proctest.Event{Text: words("D", 15), Key: "k-busy"})
	waitLogged(t, c, busy, "the drained turn's second word", isDelta("D2"))
	aOwner := readRow(t, c, busy).Owner

	if err := a.Terminate(); err != nil {
		t.Fatal(err)
	}
	termed := time.Now()
	ctx := timeout(t, 20*time.Second)
	client := c.Client()
	notReadyWithLease, refused := false, false
	for !notReadyWithLease || !refused {
		code, err := client.Status(ctx, a.URL(), "/readyz")
		if err != nil {
			t.Fatalf("readyz during drain: %v (ready false with the lease held: %v, refused: %v)", err, notReadyWithLease, refused)
		}
		if code == http.StatusServiceUnavailable {
			if row := readRow(t, c, busy); row.Owner == aOwner && row.Remaining > 0 {
				notReadyWithLease = true
			}
			if !refused {
				r := post(t, c, a, "drain-new", proctest.Event{Text: "x", Key: "k"})
				if r.Status != http.StatusServiceUnavailable || r.Code != "draining" || r.Retry == nil {
					t.Fatalf("post to a draining node: %v, want 503 draining with a retry directive", r)
				}
				refused = true
			}
		}
	}
	if got := waitClosed(t, sock); got != websocket.StatusServiceRestart {
		t.Errorf("socket closed with %v, want 1012", got)
	}
	st, err := a.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(termed)
	t.Logf("SIGTERM to exit: %v (DRAIN_WINDOW %v)", took.Round(time.Millisecond), window)
	if !st.Success() {
		t.Errorf("exit state %v", st)
	}
	if n := a.Logs().Count(0, proctest.Msg("drain incomplete")); n != 0 {
		t.Errorf("the drain did not complete within DRAIN_WINDOW")
	}

	for _, s := range []struct {
		id   string
		acc  proctest.Accepted
		text string
	}{{busy, busyAcc, words("D", 15)}, {idle, idleAcc, "idle"}} {
		row := readRow(t, c, s.id)
		if row.Remaining > 0 {
			t.Errorf("%s: lease still live for %v after the drain", s.id, row.Remaining)
		}
		r := post(t, c, b, s.id, proctest.Event{Text: "after", Key: "k-after"})
		if r.Accepted == nil || r.Accepted.Epoch != s.acc.Epoch+1 {
			t.Errorf("%s: first post after the drain: %v, want 202 at epoch %d", s.id, r, s.acc.Epoch+1)
		}
		view := waitView(t, c, b, s.id, "the turn after the drain", turnsDone(2))
		if got := userCounts(view.History); got[s.text] != 1 || got["after"] != 1 {
			t.Errorf("%s: history %+v", s.id, view.History)
		}
	}
}

// TestAdminDrain: POST /admin/drain drains the node without stopping it:
// readiness false, leases handed back, sockets closed with 1012, new
// sockets and events refused, the process still alive.
func TestAdminDrain(t *testing.T) {
	c := newCluster(t, nil)
	a, b := c.Start("a", nil), c.Start("b", nil)
	const id = "admin-drain"
	acc := mustAccept(t, c, a, id, proctest.Event{Text: "hello", Key: "k1"})
	waitView(t, c, a, id, "the turn", turnsDone(1))
	sock := joinObserver(t, c, a, id)

	client := c.Client()
	ctx := timeout(t, 20*time.Second)
	if code, err := client.AdminDrain(ctx, a.URL()); err != nil || code != http.StatusAccepted {
		t.Fatalf("POST /admin/drain: %d %v", code, err)
	}
	if got := waitClosed(t, sock); got != websocket.StatusServiceRestart {
		t.Errorf("socket closed with %v, want 1012", got)
	}
	if code, err := client.Status(ctx, a.URL(), "/readyz"); err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("readyz after the drain: %d %v", code, err)
	}
	waitReleased(t, c, id)
	if code, err := client.Status(ctx, a.URL(), "/healthz"); err != nil || code != http.StatusOK || !a.Running() {
		t.Errorf("healthz after an admin drain: %d %v", code, err)
	}
	info, err := client.AdminNode(ctx, a.URL())
	if err != nil || !info.Draining || info.Ready || info.Sessions != 0 {
		t.Errorf("admin node after the drain: %+v %v", info, err)
	}
	if r := post(t, c, a, id, proctest.Event{Text: "x", Key: "k2"}); r.Code != "draining" || r.Retry == nil {
		t.Errorf("post to the drained node: %v", r)
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if s, err := phxtest.DialNode(dctx, a.URL(), c.Token()); err == nil {
		s.Close()
		t.Error("a drained node accepted a new socket")
	}
	r := post(t, c, b, id, proctest.Event{Text: "elsewhere", Key: "k2"})
	if r.Accepted == nil || r.Accepted.Epoch != acc.Epoch+1 {
		t.Errorf("first post elsewhere after the drain: %v, want 202 at epoch %d", r, acc.Epoch+1)
	}
}

// waitReleased polls until session id's lease is no longer live.
func waitReleased(t *testing.T, c *proctest.Cluster, id string) {
	t.Helper()
	ctx := timeout(t, 10*time.Second)
	for readRow(t, c, id).Remaining > 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: lease never handed back", id)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestSIGTERMDrainHandsOverLongTurn: SIGTERM in the middle of a turn
// longer than DRAIN_WINDOW. The drain lets it run for the window, then
// hands it over instead of dropping it: the process exits 0, the lease is
// released, the input is still in the inbox, and the next owner resumes
// the turn (an observer there sees turn_resumed) and completes it, every
// word once, the reply whole. Nothing is lost.
func TestSIGTERMDrainHandsOverLongTurn(t *testing.T) {
	c := newCluster(t, map[string]string{"ECHO_DELAY": "100ms", "DRAIN_WINDOW": "1s"})
	a, b := c.Start("a", nil), c.Start("b", nil)
	const id = "drain-long"
	long := words("H", 40) // about 4 s of deltas, past the 1 s window
	acc := mustAccept(t, c, a, id, proctest.Event{Text: long, Key: "k-long"})
	obs := joinObserver(t, c, b, id)
	waitLogged(t, c, id, "the long turn's second word", isDelta("H2"))

	if err := a.Terminate(); err != nil {
		t.Fatal(err)
	}
	termed := time.Now()
	ctx := timeout(t, 30*time.Second)
	st, err := a.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Success() {
		t.Errorf("exit state %v", st)
	}
	// A hand-over is the drain doing its job, not a failure of it.
	if n := a.Logs().Count(0, proctest.Msg("drain incomplete")); n != 0 {
		t.Errorf("the node logged the hand-over as an incomplete drain")
	}
	if n := a.Logs().Count(0, proctest.Msg("drain window ended: running turns handed over to the next owner, which resumes them")); n != 1 {
		t.Errorf("the node logged %d hand-over lines, want 1", n)
	}
	row := readRow(t, c, id)
	if row.Remaining > 0 {
		t.Errorf("lease still live for %v after the drain", row.Remaining)
	}
	if logged := replayLog(t, c, id); hasType(logged, agent.TypeTurnFailed) || hasType(logged, agent.TypeTurnCompleted) {
		t.Fatalf("the drained turn ended on the draining node: %v", logged)
	}

	r := post(t, c, b, id, proctest.Event{Text: "after", Key: "k-after"})
	if r.Accepted == nil || r.Accepted.Epoch != acc.Epoch+1 {
		t.Fatalf("first post after the drain: %v, want 202 at epoch %d", r, acc.Epoch+1)
	}
	view := waitView(t, c, b, id, "the handed-over turn and the next", turnsDone(2))
	t.Logf("SIGTERM to the handed-over turn completed on the next owner: %v (DRAIN_WINDOW %v, about 4 s of deltas)",
		time.Since(termed).Round(time.Millisecond), c.Duration("DRAIN_WINDOW"))
	if got := userCounts(view.History); got[long] != 1 || got["after"] != 1 {
		t.Errorf("history %+v", view.History)
	}
	assertReplyOnce(t, replayLog(t, c, id), view.History, "H", long)
	if err := obs.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	assertSawResumed(t, obs.Events(), acc, acc.Epoch+1)
}

func hasType(evs []agent.Event, typ string) bool {
	for _, ev := range evs {
		if ev.Type == typ {
			return true
		}
	}
	return false
}
