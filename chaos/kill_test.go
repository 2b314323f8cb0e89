package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/testkit/proctest"
)

// waitLogged polls the replay log until it holds an event matching ok.
func waitLogged(t *testing.T, c *proctest.Cluster, id, what string, ok func(agent.Event) bool) {
	t.Helper()
	ctx := timeout(t, 20*time.Second)
	for {
		for _, ev := range replayLog(t, c, id) {
			if ok(ev) {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("session %s: the replay log never showed %s", id, what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func isDelta(text string) func(agent.Event) bool {
	return func(ev agent.Event) bool {
		return ev.Type == agent.TypeDelta && string(ev.Data) == fmt.Sprintf(`{"text":%q}`, text+" ")
	}
}

// TestKillOwnerMidTurn: the owner dies by SIGKILL in the middle of a turn.
// Events posted to the other nodes inside the takeover window each get a
// retry directive (or, when forwarded to the dead owner before NATS noticed
// its end, 504 forward_timeout, re-sent with the same key); following it,
// each is accepted exactly once at epoch+1
// (one lapse: a second would show as epoch+2); the new owner thawed the
// inbox (the killed turn's input was durable before its 202) and resumed
// the killed turn from its journal in the replay log: the observer saw
// turn_resumed for it, its deltas across both epochs are every word
// exactly once, and its reply in the history is the whole text. How long
// after the kill the first event was served is logged as a figure.
func TestKillOwnerMidTurn(t *testing.T) {
	c := newCluster(t, map[string]string{"ECHO_DELAY": "100ms"})
	a, b, cc := c.Start("a", nil), c.Start("b", nil), c.Start("c", nil)
	ttl := c.Duration("LEASE_TTL")
	const id = "kill-mid-turn"

	first := mustAccept(t, c, a, id, proctest.Event{Text: "before the crash", Key: "k-first"})
	waitView(t, c, a, id, "the first turn", turnsDone(1))
	long := words("L", 40)
	mid := mustAccept(t, c, a, id, proctest.Event{Text: long, Key: "k-long"})
	if mid.Epoch != first.Epoch {
		t.Fatalf("epoch moved between two events on the owner: %d then %d", first.Epoch, mid.Epoch)
	}
	obs := joinObserver(t, c, cc, id)
	waitLogged(t, c, id, "the long turn's third word", isDelta("L3"))

	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()

	const n = 6
	outs := make([]proctest.Outcome, n)
	began := make([]time.Duration, n) // each delivery's start, since the kill
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes := []*proctest.Proc{b, cc}
			pick := func(k int) string { return nodes[(i+k)%2].URL() }
			ev := proctest.Event{Text: fmt.Sprintf("window %d", i), Key: fmt.Sprintf("k-window-%d", i)}
			began[i] = time.Since(killed)
			outs[i] = c.Client().Deliver(timeout(t, 30*time.Second), pick, id, ev)
		}()
	}
	wg.Wait()

	servedAfter := time.Duration(1 << 62)
	for i, o := range outs {
		if o.Err != nil || o.Accepted == nil {
			t.Fatalf("window event %d: %v (attempts %+v)", i, o.Err, o.Attempts)
		}
		if o.Accepted.Epoch != first.Epoch+1 || o.Accepted.Duplicate {
			t.Errorf("window event %d accepted as %+v, want a new event at epoch %d", i, *o.Accepted, first.Epoch+1)
		}
		// A POST forwarded to the killed owner before the NATS server
		// noticed its connection was gone waits out the forward timeout:
		// 504 forward_timeout, re-sent with the same key (README). Any other
		// first answer is the takeover's retry directive.
		r := o.Attempts[0].Reply
		if o.Unknowns > 0 && r.Status == http.StatusGatewayTimeout && r.Code == "forward_timeout" {
			t.Logf("window event %d: first answer %v (the request reached the dead owner's subscription), re-sent", i, r)
		} else if r.Status != http.StatusServiceUnavailable || r.Code != "session_moving" || r.Retry == nil || r.RetryAfter == "" {
			t.Errorf("window event %d: first answer %v, want 503 session_moving with a retry directive", i, r)
		}
		servedAfter = min(servedAfter, began[i]+o.Attempts[len(o.Attempts)-1].At)
	}
	t.Logf("first event served %v after the kill (spec bound TTL + 1s = %v)", servedAfter.Round(time.Millisecond), ttl+time.Second)

	view := waitView(t, c, b, id, "every window turn and the killed one", turnsDone(2+n))
	if view.Epoch != first.Epoch+1 {
		t.Errorf("view epoch %d, want %d", view.Epoch, first.Epoch+1)
	}
	if len(view.History) < 2 || view.History[0] != (proctest.Message{Role: "user", Content: "before the crash"}) ||
		view.History[1] != (proctest.Message{Role: "assistant", Content: "before the crash"}) {
		t.Fatalf("history does not start with the stored turn: %+v", view.History)
	}
	counts := userCounts(view.History)
	if counts[long] != 1 {
		t.Errorf("the killed turn's input is %d times in the new owner's history, want once (run again from the inbox): %+v", counts[long], view.History)
	}
	logged := loggedUserEvents(replayLog(t, c, id))
	for i := range n {
		txt := fmt.Sprintf("window %d", i)
		if counts[txt] != 1 {
			t.Errorf("%q is %d times in the history, want once", txt, counts[txt])
		}
		if got := logged[txt]; len(got) != 1 || got[0] != first.Epoch+1 {
			t.Errorf("%q in the replay log at epochs %v, want once at %d", txt, got, first.Epoch+1)
		}
	}
	if got := logged[long]; len(got) != 1 || got[0] != first.Epoch {
		t.Errorf("the killed turn's user_event in the log at epochs %v, want once at %d", got, first.Epoch)
	}
	assertReplyOnce(t, replayLog(t, c, id), view.History, "L", long)

	// The observer on c saw every window event once, at the new epoch, and
	// nothing of the old epoch after the first event of the new one.
	ctx := timeout(t, 20*time.Second)
	seen := map[string]int{}
	for len(seen) < n {
		ev, err := obs.WaitEvent(ctx, func(ev phxtest.SessionEvent) bool { return ev.Type == agent.TypeUserEvent })
		if err != nil {
			t.Fatalf("observer: %v (saw %v)", err, seen)
		}
		if txt := userEventText(ev.Data); txt != long && txt != "before the crash" {
			seen[txt]++
		}
	}
	if err := obs.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	assertSawResumed(t, obs.Events(), mid, first.Epoch+1)
	checkSocketEpochs(t, obs.Events(), first.Epoch+1)
	for txt, k := range userSocketCounts(obs.Events()) {
		if k != 1 {
			t.Errorf("observer saw user_event %q %d times", txt, k)
		}
	}
}

// assertReplyOnce checks a turn that ran on more than one owner: the
// deltas of its words (prefix + number) in the replay log, across every
// epoch, concatenate to text with each word once, and the history holds
// text's reply whole, right after its input.
func assertReplyOnce(t *testing.T, log []agent.Event, history []proctest.Message, prefix, text string) {
	t.Helper()
	word := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `[0-9]+ $`)
	var got strings.Builder
	for _, ev := range log {
		if ev.Type != agent.TypeDelta {
			continue
		}
		var d struct{ Text string }
		if json.Unmarshal(ev.Data, &d) == nil && word.MatchString(d.Text) {
			got.WriteString(d.Text)
		}
	}
	if got.String() != text+" " {
		var b strings.Builder
		for _, ev := range log {
			if ev.Type != agent.TypeDelta {
				fmt.Fprintf(&b, "\n  %d-%d %s %s prev %v", ev.Epoch, ev.Seq, ev.Type, ev.Data, ev.Prev)
			}
		}
		t.Errorf("the turn's deltas across owners = %q, want every word once: %q\nlog but deltas:%s", got.String(), text+" ", b.String())
	}
	for i, m := range history {
		if m.Role == "user" && m.Content == text {
			if i+1 >= len(history) || history[i+1] != (proctest.Message{Role: "assistant", Content: text}) {
				t.Errorf("the turn's reply is not the whole text: %+v", history[i+1:])
			}
			return
		}
	}
	t.Errorf("the turn's input is not in the history: %+v", history)
}

// assertSawResumed checks that a socket saw turn_resumed at epoch for the
// turn of the input accepted at in, attempt 2, continuing after an event
// of an older epoch.
func assertSawResumed(t *testing.T, evs []phxtest.SessionEvent, in proctest.Accepted, epoch int64) {
	t.Helper()
	for _, ev := range evs {
		if ev.Type != agent.TypeTurnResumed {
			continue
		}
		var d struct {
			Turn    agent.Position
			Attempt int
			From    agent.Position
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil || ev.Epoch != epoch || d.Turn != (agent.Position{Epoch: in.Epoch, Seq: in.Seq}) ||
			d.Attempt != 2 || d.From.Epoch >= epoch {
			t.Errorf("turn_resumed at %d-%d: %s, want turn %d-%d attempt 2 from an older epoch", ev.Epoch, ev.Seq, ev.Data, in.Epoch, in.Seq)
		}
		return
	}
	t.Errorf("the socket never saw turn_resumed")
}

// checkSocketEpochs fails when a socket saw an event of an epoch below
// newEpoch after the first event of newEpoch, or one position twice.
func checkSocketEpochs(t *testing.T, evs []phxtest.SessionEvent, newEpoch int64) {
	t.Helper()
	pos := map[[2]int64]bool{}
	moved := false
	for _, ev := range evs {
		p := [2]int64{ev.Epoch, ev.Seq}
		if pos[p] {
			t.Errorf("socket saw position %v twice", p)
		}
		pos[p] = true
		if ev.Epoch >= newEpoch {
			moved = true
		} else if moved {
			t.Errorf("socket saw %s at epoch %d seq %d after the new owner's epoch %d", ev.Type, ev.Epoch, ev.Seq, newEpoch)
		}
	}
	if !moved {
		t.Errorf("socket never saw epoch %d", newEpoch)
	}
}

// userSocketCounts counts a socket's user_events by text.
func userSocketCounts(evs []phxtest.SessionEvent) map[string]int {
	out := map[string]int{}
	for _, ev := range evs {
		if ev.Type == agent.TypeUserEvent {
			out[userEventText(ev.Data)]++
		}
	}
	return out
}

// TestKillOwnerKeepsQueuedEvents: events the owner accepted (202) while a
// turn was running wait in its mailbox for their turn. When the owner is
// killed mid-turn, those accepted events are not lost: the next owner
// thaws them from the inbox and runs them, each once, after the killed
// turn, which it resumes from the next word.
func TestKillOwnerKeepsQueuedEvents(t *testing.T) {
	c := newCluster(t, map[string]string{"ECHO_DELAY": "100ms"})
	a, b := c.Start("a", nil), c.Start("b", nil)
	const id = "kill-queued"
	long := words("Q", 40)
	mustAccept(t, c, a, id, proctest.Event{Text: long, Key: "k-long"})
	waitLogged(t, c, id, "the long turn's second word", isDelta("Q2"))
	const queued = 3
	for i := range queued {
		mustAccept(t, c, a, id, proctest.Event{Text: fmt.Sprintf("queued %d", i), Key: fmt.Sprintf("k-queued-%d", i)})
	}
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	out := c.Client().Deliver(timeout(t, 20*time.Second), func(int) string { return b.URL() }, id, proctest.Event{Text: "after", Key: "k-after"})
	if out.Err != nil {
		t.Fatal(out.Err)
	}
	view := waitView(t, c, b, id, "the killed, queued and later turns", turnsDone(queued+2))
	counts := userCounts(view.History)
	if counts[long] != 1 {
		t.Errorf("the killed turn's input is %d times in the history, want once: %+v", counts[long], view.History)
	}
	assertReplyOnce(t, replayLog(t, c, id), view.History, "Q", long)
	for i := range queued {
		if txt := fmt.Sprintf("queued %d", i); counts[txt] != 1 {
			t.Errorf("accepted event %q is %d times in the history after the owner died: %+v", txt, counts[txt], view.History)
		}
	}
	// Their keys survived too: re-sending is a duplicate.
	if r := mustAccept(t, c, b, id, proctest.Event{Text: "queued 0", Key: "k-queued-0"}); !r.Duplicate {
		t.Errorf("re-sent queued key accepted as new: %+v", r)
	}
}
