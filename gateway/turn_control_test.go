package gateway

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/trace"
)

// Turn control over HTTP (README "Turn control"): the echo agent, with an
// hour between words, streams its first word and then runs until stopped.
// A stop of the running turn answers stopped:true and the history keeps
// the partial reply marked stopped; a stop of a finished or unknown turn
// answers stopped:false, not_running; a bad turn id is 400 invalid_turn.
// Double texting: reject answers 409 session_busy_turn naming the running
// turn and accepts nothing; interrupt stops the running turn and runs the
// new event; a bad multitask is 400 invalid_body.
func TestTurnControlHTTP(t *testing.T) {
	_, srv, tr := testNode(t, func(c *Config) { c.EchoDelay = time.Hour })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := srv.URL + "/api/sessions/tc1"
	waitEmit := func(typ string, n int) {
		t.Helper()
		if _, err := tr.WaitForN(ctx, trace.Kind("session.emit", "session", "tc1", "type", typ), n); err != nil {
			t.Fatal(err, tr.Dump())
		}
	}
	post := func(body string, want int) map[string]any {
		t.Helper()
		status, _, b := do(t, "POST", base+"/events", testAPIKey, "", body)
		if status != want {
			t.Fatalf("post %s = %d %v, want %d", body, status, b, want)
		}
		return b
	}
	stopTurn := func(turn string, want int) map[string]any {
		t.Helper()
		status, _, b := do(t, "POST", base+"/turns/"+turn+"/stop", testAPIKey, "", "")
		if status != want {
			t.Fatalf("stop %s = %d %v, want %d", turn, status, b, want)
		}
		return b
	}

	post(`{"data":{"text":"alpha beta"}}`, http.StatusAccepted) // 1-1
	waitEmit("delta", 1)
	if b := stopTurn("1-1", http.StatusOK); b["stopped"] != true || b["turn"] != "1-1" {
		t.Fatalf("stop of the running turn = %v", b)
	}
	waitEmit("turn_stopped", 1)
	_, _, sess := do(t, "GET", base, testAPIKey, "", "")
	hist, _ := sess["history"].([]any)
	if len(hist) != 2 {
		t.Fatalf("history %v, want the user message and the partial reply", sess["history"])
	}
	if reply := hist[1].(map[string]any); reply["content"] != "alpha " || reply["stopped"] != true {
		t.Fatalf("partial reply %v, want \"alpha \" stopped", reply)
	}
	for _, turn := range []string{"1-1", "7-7"} {
		if b := stopTurn(turn, http.StatusOK); b["stopped"] != false || b["reason"] != "not_running" || b["running"] != nil {
			t.Fatalf("stop %s = %v, want not_running with nothing running", turn, b)
		}
	}
	for _, bad := range []string{"x", "1", "0-1", "1-0", "1-2-3", "-1-2"} {
		if b := stopTurn(bad, http.StatusBadRequest); b["error"] != CodeInvalidTurn {
			t.Fatalf("stop %q = %v, want %s", bad, b, CodeInvalidTurn)
		}
	}

	running := post(`{"data":{"text":"gamma delta"}}`, http.StatusAccepted)
	waitEmit("delta", 2)
	turn := "1-" + jsonInt(running["seq"])
	b := post(`{"data":{"text":"no"},"multitask":"reject"}`, http.StatusConflict)
	if b["error"] != CodeSessionBusyTurn || b["turn"] != turn {
		t.Fatalf("reject = %v, want %s naming %s", b, CodeSessionBusyTurn, turn)
	}
	if b := post(`{"data":{"text":"x"},"multitask":"later"}`, http.StatusBadRequest); b["error"] != CodeInvalidBody {
		t.Fatalf("bad multitask = %v", b)
	}
	if b := stopTurn(turn, http.StatusOK); b["stopped"] != true || b["turn"] != turn {
		t.Fatalf("stop of %s = %v, want stopped (the rejected event changed nothing)", turn, b)
	}
	waitEmit("turn_stopped", 2)
	post(`{"data":{"text":"epsilon zeta"}}`, http.StatusAccepted)
	waitEmit("delta", 3)
	post(`{"data":{"text":"eta"},"multitask":"interrupt"}`, http.StatusAccepted)
	waitEmit("turn_stopped", 3)
	waitEmit("turn_completed", 1) // "eta" is one word: it completes at once
	_, _, sess = do(t, "GET", base, testAPIKey, "", "")
	hist, _ = sess["history"].([]any)
	var got []any
	for _, h := range hist {
		m := h.(map[string]any)
		got = append(got, m["content"], m["stopped"])
	}
	want := []any{"alpha beta", nil, "alpha ", true, "gamma delta", nil, "gamma ", true, "epsilon zeta", nil, "epsilon ", true, "eta", nil, "eta", nil}
	if len(got) != len(want) {
		t.Fatalf("history %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("history %v, want %v", got, want)
		}
	}
}

func jsonInt(v any) string {
	f, _ := v.(float64)
	return strconv.FormatInt(int64(f), 10)
}
