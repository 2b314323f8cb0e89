package chaos

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/relaygw/relay/internal/testkit/proctest"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/natsforward"
)

// The four outcomes of a forward (docs/OWNERSHIP.md "Event (write)"), each produced
// with real processes, NATS and the process controls.

// TestForwardAccepted: a non-owner forwards to the owner, which accepts:
// the caller gets the owner's 202 at the owner's epoch.
func TestForwardAccepted(t *testing.T) {
	c := newCluster(t, nil)
	a, b := c.Start("a", nil), c.Start("b", nil)
	const id = "fwd-accepted"
	first := mustAccept(t, c, a, id, proctest.Event{Text: "on the owner", Key: "k1"})
	fwd := mustAccept(t, c, b, id, proctest.Event{Text: "via b", Key: "k2"})
	if fwd.Epoch != first.Epoch || fwd.Seq <= first.Seq || fwd.Duplicate {
		t.Fatalf("forwarded event accepted as %+v after %+v", fwd, first)
	}
	if got := metric(t, b, "relay_forwards_total"); got != 1 {
		t.Errorf("b forwarded %v times, want 1", got)
	}
	if got := metric(t, b, "relay_events_accepted_total"); got != 0 {
		t.Errorf("b accepted %v events itself, want 0", got)
	}
	if got := metric(t, a, "relay_events_accepted_total"); got != 2 {
		t.Errorf("a accepted %v events, want 2", got)
	}
	// The forwarded key is the owner's: a re-send through b is a duplicate.
	dup := mustAccept(t, c, b, id, proctest.Event{Text: "via b", Key: "k2"})
	if !dup.Duplicate || dup.Seq != fwd.Seq {
		t.Errorf("re-sent key answered %+v, want the duplicate of %+v", dup, fwd)
	}
	view := waitView(t, c, b, id, "both turns", turnsDone(2))
	if got := userCounts(view.History); got["on the owner"] != 1 || got["via b"] != 1 {
		t.Errorf("history %+v", view.History)
	}
}

// TestForwardTimeout: the owner's process is frozen (SIGSTOP) with its
// lease live, so the forward gets no answer in time: 504 forward_timeout,
// "may have been accepted". Once the owner runs again it does accept the
// late request; the client's re-send with the same key is then a
// duplicate, and the event is in the history once.
func TestForwardTimeout(t *testing.T) {
	// The lease outlives the 5 s forward timeout, so the owner keeps it.
	c := newCluster(t, map[string]string{"LEASE_TTL": "10s", "LEASE_RENEW": "1s"})
	a, b := c.Start("a", nil), c.Start("b", nil)
	const id = "fwd-timeout"
	mustAccept(t, c, a, id, proctest.Event{Text: "first", Key: "k1"})
	waitView(t, c, a, id, "the first turn", turnsDone(1))

	if err := a.Pause(); err != nil {
		t.Fatal(err)
	}
	r := post(t, c, b, id, proctest.Event{Text: "late", Key: "k-late"})
	if err := a.Resume(); err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusGatewayTimeout || r.Code != "forward_timeout" || r.Retry != nil ||
		!strings.Contains(r.Message, "may have been accepted") {
		t.Fatalf("forward to a frozen owner: %v, want 504 forward_timeout", r)
	}
	// The resumed owner handles the request it had queued.
	waitMetric(t, a, "relay_events_accepted_total", 2)
	again := mustAccept(t, c, b, id, proctest.Event{Text: "late", Key: "k-late"})
	if !again.Duplicate {
		t.Errorf("re-send after the timeout accepted as a new event %+v; the owner had accepted it", again)
	}
	view := waitView(t, c, b, id, "the late turn", turnsDone(2))
	if got := userCounts(view.History)["late"]; got != 1 {
		t.Errorf("late event %d times in the history", got)
	}
	if owner := readRow(t, c, id).Owner; !strings.HasPrefix(owner, "a/") {
		t.Errorf("owner %s, want a's incarnation (the pause was shorter than the lease)", owner)
	}
}

// TestForwardRemoteError: the owner answers with an error. A real node
// answers a malformed forward with the session code bad_request; a
// stand-in owner (a lease row naming it, a NATS responder on its forward
// subject) answers busy, draining, a lease held by a third process, an
// internal error, and a reply that is not JSON: the caller surfaces each
// with its documented code (a retry directive only for the refusals, its
// delay from the remaining lease time the owner reported).
func TestForwardRemoteError(t *testing.T) {
	c := newCluster(t, nil)
	a := c.Start("a", nil)
	nc := testenv.NATSConn(t)

	msg, err := nc.Request(natsforward.Subject(c.Name, "a"), []byte("not json"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep session.ForwardReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil || rep.Error == nil || rep.Error.Code != session.CodeBadRequest {
		t.Fatalf("malformed forward answered %s", msg.Data)
	}

	const id = "fwd-remote-error"
	setLease(t, c, id, "ghost/1", 7, time.Hour)
	answers := make(chan []byte, 2)
	sub, err := nc.Subscribe(natsforward.Subject(c.Name, "ghost"), func(m *nats.Msg) {
		var req session.ForwardRequest
		if json.Unmarshal(m.Data, &req) != nil || req.Session != id || req.Input.IdempotencyKey != "k" {
			t.Errorf("stand-in owner got %s", m.Data)
		}
		_ = m.Respond(<-answers)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	reply := func(e *session.RemoteError) string {
		b, err := json.Marshal(session.ForwardReply{Error: e})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tc := range []struct {
		answer  string
		status  int
		code    string
		retryMS int64 // 0: no retry directive
	}{
		{reply(&session.RemoteError{Code: session.CodeBusy, Message: "mailbox full"}), http.StatusTooManyRequests, "session_busy", 0},
		{reply(&session.RemoteError{Code: session.CodeDraining, Message: "draining"}), http.StatusServiceUnavailable, "draining", 100},
		{reply(&session.RemoteError{Code: session.CodeInternal, Message: "internal error"}), http.StatusBadGateway, "forward_failed", 0},
		{`<html>not a reply</html>`, http.StatusBadGateway, "forward_failed", 0},
	} {
		answers <- []byte(tc.answer)
		r := post(t, c, a, id, proctest.Event{Text: "x", Key: "k"})
		if r.Status != tc.status || r.Code != tc.code || (r.Retry != nil) != (tc.retryMS > 0) ||
			(r.Retry != nil && !jittered(r.Retry.AfterMS, tc.retryMS)) {
			t.Errorf("owner answered %s: got %v, want %d %s (retry after %d ms)", tc.answer, r, tc.status, tc.code, tc.retryMS)
		}
	}
	// The stand-in says a third process holds the lease, 20 s left: the
	// caller forwards there and finds no responders, re-resolves with a
	// fresh claim (the ghost's row), hears the same from the ghost, finds
	// no responders again and refuses with the third's remaining time.
	third := reply(&session.RemoteError{Code: session.CodeLeaseHeld, Message: "held",
		Held: &session.LeaseHeldError{Key: id, Holder: "third/1", Epoch: 8, Remaining: 20 * time.Second}})
	answers <- []byte(third)
	answers <- []byte(third)
	r := post(t, c, a, id, proctest.Event{Text: "x", Key: "k"})
	if r.Status != http.StatusServiceUnavailable || r.Code != "session_moving" || r.Retry == nil ||
		!jittered(r.Retry.AfterMS, (20*time.Second+50*time.Millisecond).Milliseconds()) {
		t.Errorf("owner answered a third holder: got %v, want 503 session_moving, retry after the third's 20 s", r)
	}
	if got := metric(t, a, "relay_events_accepted_total"); got != 0 {
		t.Errorf("a accepted %v events while another owner's lease was live", got)
	}
}

// TestForwardUnreachable: the owner is gone (SIGKILL) but its lease is
// live. The forward finds no responders, the node re-resolves with a fresh
// claim, meets the same live lease, finds no responders again and refuses
// with a retry directive whose delay is the holder's remaining lease time.
// After the lease lapses, the re-sent event takes the session over.
func TestForwardUnreachable(t *testing.T) {
	c := newCluster(t, nil)
	a, b := c.Start("a", nil), c.Start("b", nil)
	ttl := c.Duration("LEASE_TTL")
	const id = "fwd-unreachable"
	first := mustAccept(t, c, a, id, proctest.Event{Text: "first", Key: "k1"})
	waitView(t, c, a, id, "the first turn", turnsDone(1))
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	from := b.Logs().Len()
	r := post(t, c, b, id, proctest.Event{Text: "second", Key: "k2"})
	if r.Status != http.StatusServiceUnavailable || r.Code != "session_moving" || r.Retry == nil {
		t.Fatalf("post with the owner dead and its lease live: %v", r)
	}
	if after := time.Duration(r.Retry.AfterMS) * time.Millisecond; after <= 0 || after > ttl+100*time.Millisecond+session.RetryJitter {
		t.Errorf("retry after %v, want the holder's remaining lease (at most TTL %v)", after, ttl)
	}
	// Log lines reach the test through a pipe: wait for the second, then
	// make sure there are exactly two.
	hops := proctest.Msg("owner unreachable; re-resolving with a fresh claim", "session", id)
	if _, err := b.Logs().WaitForN(timeout(t, 20*time.Second), from, hops, 2); err != nil {
		t.Error(err)
	}
	if n := b.Logs().Count(from, hops); n != 2 {
		t.Errorf("b logged %d unreachable hops, want 2", n)
	}
	out := c.Client().Deliver(timeout(t, 20*time.Second), func(int) string { return b.URL() }, id, proctest.Event{Text: "second", Key: "k2"})
	if out.Err != nil || out.Accepted.Epoch != first.Epoch+1 {
		t.Fatalf("after the lease lapsed: %v %+v", out.Err, out.Accepted)
	}

	// A holder that never existed: the directive's delay follows the
	// remaining time the database reports for it.
	const ghostID = "fwd-unreachable-ghost"
	setLease(t, c, ghostID, "ghost/1", 3, 30*time.Second)
	r = post(t, c, b, ghostID, proctest.Event{Text: "x", Key: "k"})
	if r.Status != http.StatusServiceUnavailable || r.Code != "session_moving" || r.Retry == nil {
		t.Fatalf("post to a session held by an unreachable node: %v", r)
	}
	if r.Retry.AfterMS < 25_000 || r.Retry.AfterMS > 30_100+session.RetryJitter.Milliseconds() || r.Retry.BudgetMS <= r.Retry.AfterMS || r.RetryAfter == "" {
		t.Errorf("directive %+v (Retry-After %q), want a delay near the 30 s left on the lease", *r.Retry, r.RetryAfter)
	}
}

// jittered reports whether afterMS is base plus a retry jitter (under
// session.RetryJitter).
func jittered(afterMS, base int64) bool {
	return afterMS >= base && afterMS < base+session.RetryJitter.Milliseconds()
}
