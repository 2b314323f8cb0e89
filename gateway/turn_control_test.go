package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/trace"
	"github.com/relaygw/relay/session"
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

// Interrupts over HTTP: the echo agent asked to ask raises an interrupt;
// the first answer is 202 and its continuation streams; a second is 409
// interrupt_answered, an unknown id 404 interrupt_not_found, a bad body
// 400 invalid_body. The history shows the interrupt (role interrupt).
func TestInterruptHTTP(t *testing.T) {
	_, srv, tr := testNode(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := srv.URL + "/api/sessions/ih1"
	if status, _, b := do(t, "POST", base+"/events", testAPIKey, "", `{"data":{"text":"go on","ask":true}}`); status != http.StatusAccepted {
		t.Fatalf("post: %d %v", status, b)
	}
	if _, err := tr.WaitForN(ctx, trace.Kind("session.emit", "session", "ih1", "type", "interrupt"), 1); err != nil {
		t.Fatal(err, tr.Dump())
	}
	_, _, sess := do(t, "GET", base, testAPIKey, "", "")
	hist, _ := sess["history"].([]any)
	if len(hist) != 2 || hist[1].(map[string]any)["role"] != "interrupt" {
		t.Fatalf("history %v, want the interrupt", sess["history"])
	}
	for _, tc := range []struct {
		iid, body string
		status    int
		code      string
	}{
		{"nope", `{"value":"approve"}`, http.StatusNotFound, CodeNoInterrupt},
		{"ask-1-1", `{"value":"approve","extra":1}`, http.StatusBadRequest, CodeInvalidBody},
		{"ask-1-1", `[1]`, http.StatusBadRequest, CodeInvalidBody},
		{"bad%20id", `{"value":1}`, http.StatusBadRequest, CodeInvalidBody},
	} {
		if status, _, b := do(t, "POST", base+"/interrupts/"+tc.iid, testAPIKey, "", tc.body); status != tc.status || b["error"] != tc.code {
			t.Fatalf("answer %s %s = %d %v, want %d %s", tc.iid, tc.body, status, b, tc.status, tc.code)
		}
	}
	status, _, b := do(t, "POST", base+"/interrupts/ask-1-1", testAPIKey, "", `{"value":"approve","idempotency_key":"ans"}`)
	if status != http.StatusAccepted || b["seq"] == nil {
		t.Fatalf("first answer = %d %v", status, b)
	}
	if status, _, b := do(t, "POST", base+"/interrupts/ask-1-1", testAPIKey, "", `{"value":"deny"}`); status != http.StatusConflict || b["error"] != CodeAnswered {
		t.Fatalf("second answer = %d %v, want 409 %s", status, b, CodeAnswered)
	}
	if _, err := tr.WaitForN(ctx, trace.Kind("session.emit", "session", "ih1", "type", "turn_completed"), 1); err != nil {
		t.Fatal(err, tr.Dump())
	}
	_, _, sess = do(t, "GET", base, testAPIKey, "", "")
	hist, _ = sess["history"].([]any)
	if last := hist[len(hist)-1].(map[string]any); last["content"] != "go on" {
		t.Fatalf("continuation reply %v, want the approved text", last)
	}
}

// FuzzDecodeAnswer: an answer body either decodes to a resume input that
// the input contract accepts and that names the interrupt, or is refused
// with a documented code.
func FuzzDecodeAnswer(f *testing.F) {
	for _, s := range []string{`{"value":"approve"}`, `{}`, `{"value":{"a":[1,2]},"idempotency_key":"k"}`, `{"value":1e999}`, `[]`, `{"value":"\u0000"}`, `{"x":1}`, ``} {
		f.Add("ask-1-1", s)
	}
	f.Fuzz(func(t *testing.T, iid, body string) {
		in, err := DecodeAnswer(iid, []byte(body))
		if err != nil {
			ae := asAPIError(err)
			if ae.Code != CodeInvalidBody && ae.Code != CodeInvalidInput {
				t.Fatalf("DecodeAnswer(%q, %q) = %v: undocumented code", iid, body, err)
			}
			return
		}
		if in.Type != agent.TypeResume || agent.ValidateInput(in) != nil {
			t.Fatalf("DecodeAnswer(%q, %q) = %+v: not a valid resume input", iid, body, in)
		}
		var d struct {
			Interrupt string          `json:"interrupt"`
			Value     json.RawMessage `json:"value"`
		}
		if json.Unmarshal(in.Data, &d) != nil || d.Interrupt != iid || len(d.Value) == 0 {
			t.Fatalf("DecodeAnswer(%q, %q) data %s does not name the interrupt", iid, body, in.Data)
		}
	})
}

// FuzzDecodeControlPushes: a "stop" or "resume" push payload either
// decodes (a turn id that round-trips; a valid resume input) or is refused
// with a documented code.
func FuzzDecodeControlPushes(f *testing.F) {
	for _, s := range []string{`{"turn":"3-17"}`, `{"turn":7}`, `{}`, `{"interrupt":"ask-1-1","value":"approve"}`, `{"interrupt":"x","value":{"a":1},"idempotency_key":"k"}`, `[]`, `{"turn":"1-1","x":1}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		if p, ae := decodeStopPush([]byte(payload)); ae != nil {
			if ae.Code != CodeInvalidBody && ae.Code != CodeInvalidTurn {
				t.Fatalf("stop %q: undocumented code %s", payload, ae.Code)
			}
		} else if q, ok := session.ParseTurnID(p.String()); !ok || q != p {
			t.Fatalf("stop %q decoded to %v, which is no turn id", payload, p)
		}
		in, err := decodeResumePush([]byte(payload))
		if err != nil {
			if c := asAPIError(err).Code; c != CodeInvalidBody && c != CodeInvalidInput {
				t.Fatalf("resume %q: undocumented code %s", payload, c)
			}
			return
		}
		if in.Type != agent.TypeResume || agent.ValidateInput(in) != nil {
			t.Fatalf("resume %q decoded to an invalid input %+v", payload, in)
		}
	})
}
