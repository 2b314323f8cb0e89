package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/proctest"
)

// controlReply is one answer of a turn-control request.
type controlReply struct {
	Status int
	Body   map[string]any
}

// postJSON posts body to url on the cluster's API key once; an error
// means no HTTP answer came.
func postJSON(ctx context.Context, c *proctest.Cluster, url, body string) (controlReply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		return controlReply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return controlReply{}, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := controlReply{Status: resp.StatusCode}
	if err := json.Unmarshal(raw, &r.Body); err != nil {
		return r, fmt.Errorf("%d body %q: %w", resp.StatusCode, raw, err)
	}
	return r, nil
}

// deliverJSON posts like a well-behaved client (README "Retry
// directive"): a 503 with a retry directive is re-sent after after_ms; any
// other answer ends it.
func deliverJSON(t *testing.T, c *proctest.Cluster, url, body string) (controlReply, int) {
	t.Helper()
	ctx := timeout(t, 40*time.Second)
	for directives := 0; ; directives++ {
		r, err := postJSON(ctx, c, url, body)
		if err != nil {
			t.Fatalf("post %s: %v", url, err)
		}
		retry, _ := r.Body["retry"].(map[string]any)
		if r.Status != http.StatusServiceUnavailable || retry == nil {
			return r, directives
		}
		after, _ := retry["after_ms"].(float64)
		select {
		case <-ctx.Done():
			t.Fatalf("post %s: still refused after %d directives: %v", url, directives, r.Body)
		case <-time.After(time.Duration(after) * time.Millisecond):
		}
	}
}

// TestKillOwnerWithPendingInterrupt: the owner raises an interrupt (the
// echo agent asked to ask) and is killed with SIGKILL. The answer, posted
// to another node and re-sent as its retry directives say, is accepted at
// the next epoch by the new owner, which rebuilt the open interrupt from
// the store; the continuation runs there and streams the approved text. A
// second answer is refused interrupt_answered.
func TestKillOwnerWithPendingInterrupt(t *testing.T) {
	c := newCluster(t, map[string]string{"ECHO_DELAY": "10ms"})
	a, b, cc := c.Start("a", nil), c.Start("b", nil), c.Start("c", nil)
	const id = "kill-interrupt"
	ctx := timeout(t, 30*time.Second)

	asked, err := postJSON(ctx, c, a.URL()+"/api/sessions/"+id+"/events", `{"data":{"text":"approve me please","ask":true}}`)
	if err != nil || asked.Status != http.StatusAccepted {
		t.Fatalf("ask: %v %v", asked, err)
	}
	epoch := int64(asked.Body["epoch"].(float64))
	iid := fmt.Sprintf("ask-%d-%d", epoch, int64(asked.Body["seq"].(float64)))
	waitLogged(t, c, id, "the interrupt", func(ev agent.Event) bool { return ev.Type == agent.TypeInterrupt })
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}

	r, directives := deliverJSON(t, c, cc.URL()+"/api/sessions/"+id+"/interrupts/"+iid, `{"value":"approve","idempotency_key":"answer-1"}`)
	if r.Status != http.StatusAccepted || r.Body["epoch"] != float64(epoch+1) {
		t.Fatalf("answer after the kill = %d %v, want 202 at epoch %d", r.Status, r.Body, epoch+1)
	}
	t.Logf("answer accepted by the new owner after %d retry directives", directives)
	view := waitView(t, c, b, id, "the continuation", turnsDone(1))
	last := view.History[len(view.History)-1]
	if last.Role != "assistant" || last.Content != "approve me please" {
		t.Fatalf("history %+v, want the continuation's approved reply last", view.History)
	}
	again, err := postJSON(ctx, c, b.URL()+"/api/sessions/"+id+"/interrupts/"+iid, `{"value":"deny"}`)
	if err != nil || again.Status != http.StatusConflict || again.Body["error"] != "interrupt_answered" {
		t.Fatalf("second answer = %v %v, want 409 interrupt_answered", again, err)
	}
}

// TestStopToPausedOwnerNeverStopsTheNextTurn: a stop for the owner's
// running turn is sent to the owner while it is frozen (SIGSTOP) past its
// lease. Another node takes the session over, resumes and completes that
// turn, and starts the next one. When the frozen owner is resumed and
// finally reads the stop, it does not act on it: its claim names the new
// owner, the stop is forwarded there, and the new owner answers
// not_running for the named turn, naming its own running turn, which runs
// to completion (no turn_stopped is ever logged).
func TestStopToPausedOwnerNeverStopsTheNextTurn(t *testing.T) {
	c := newCluster(t, map[string]string{"ECHO_DELAY": "60ms"})
	a, b, _ := c.Start("a", nil), c.Start("b", nil), c.Start("c", nil)
	const id = "stop-paused"

	t1 := mustAccept(t, c, a, id, proctest.Event{Text: words("S", 20), Key: "k-t1"})
	waitLogged(t, c, id, "the first turn's third word", isDelta("S3"))
	if err := a.Pause(); err != nil {
		t.Fatal(err)
	}
	stopAnswer := make(chan controlReply, 1)
	go func() {
		r, err := postJSON(timeout(t, 60*time.Second), c, fmt.Sprintf("%s/api/sessions/%s/turns/%d-%d/stop", a.URL(), id, t1.Epoch, t1.Seq), "")
		if err != nil {
			r = controlReply{Status: -1, Body: map[string]any{"error": err.Error()}}
		}
		stopAnswer <- r
	}()

	// The frozen owner cannot answer a forward: the first post times out,
	// then the re-sent event is taken over by b once the lease lapsed.
	if r := post(t, c, b, id, proctest.Event{Text: words("N", 40), Key: "k-t2"}); r.Status != http.StatusGatewayTimeout {
		t.Fatalf("post while the owner is frozen: %v, want 504 forward_timeout", r)
	}
	out := c.Client().Deliver(timeout(t, 30*time.Second), func(int) string { return b.URL() }, id, proctest.Event{Text: words("N", 40), Key: "k-t2"})
	if out.Err != nil || out.Accepted.Epoch != t1.Epoch+1 {
		t.Fatalf("takeover: %v %+v", out.Err, out.Accepted)
	}
	t2 := *out.Accepted
	// b resumed and completed the first turn, and runs the second.
	waitLogged(t, c, id, "the second turn's third word", isDelta("N3"))

	if err := a.Resume(); err != nil {
		t.Fatal(err)
	}
	var r controlReply
	select {
	case r = <-stopAnswer:
	case <-timeout(t, 60*time.Second).Done():
		t.Fatal("the stop sent to the frozen owner was never answered")
	}
	want := fmt.Sprintf("%d-%d", t2.Epoch, t2.Seq)
	if r.Status != http.StatusOK || r.Body["stopped"] != false || r.Body["reason"] != "not_running" || r.Body["running"] != want {
		t.Fatalf("stop answered %d %v, want 200 not_running naming the new owner's turn %s", r.Status, r.Body, want)
	}
	view := waitView(t, c, b, id, "both turns", turnsDone(2))
	for _, m := range view.History {
		if m.Role == "assistant" && m.Content != words("S", 20) && m.Content != words("N", 40) {
			t.Errorf("a reply was cut: %+v", m)
		}
	}
	for _, ev := range replayLog(t, c, id) {
		if ev.Type == agent.TypeTurnStopped {
			t.Fatalf("a turn was stopped: %v %s", ev.Pos(), ev.Data)
		}
	}
}
