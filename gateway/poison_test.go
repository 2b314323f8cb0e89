package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/internal/trace"
)

// nulReplyAgent runs a holdAgent turn and replies with a U+0000 in its text,
// which Postgres jsonb cannot hold.
type nulReplyAgent struct{ *holdAgent }

func (a nulReplyAgent) Run(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error) {
	if _, err := a.holdAgent.Run(ctx, turn, emit); err != nil {
		return agent.Message{}, err
	}
	return agent.Message{Role: "assistant", Content: "a\x00b"}, nil
}

// TestPoisonInputRefusedWhileATurnRuns: on durable stores (Postgres
// checkpoints, Redis replay log), inputs no store could keep — posted over
// HTTP or pushed on the session channel while a turn runs — are refused
// with 422 invalid_input and leave no trace in the session; the running turn
// then completes, and its reply, which holds a U+0000, is checkpointed with
// U+FFFD instead of standing the session down.
func TestPoisonInputRefusedWhileATurnRuns(t *testing.T) {
	dbURL := testenv.PostgresURL(t)
	_, prefix := testenv.Redis(t)
	tr := trace.New()
	ag := nulReplyAgent{newHoldAgent("")}
	n, srv := storeNode(t, "a", dbURL, strings.TrimSuffix(prefix, ":"), tr, ag, nil)
	tok, _ := n.Auth().Mint("u", []string{"*"}, time.Hour)
	ws := phxtest.DialT(t, phxtest.URL(srv.URL, tok))
	joinRef := ws.Send("", "session:p1", "phx_join", map[string]any{})
	if f, _ := ws.Until(joinRef); !strings.Contains(string(f.Payload), `"status":"ok"`) {
		t.Fatalf("join: %s", f.Payload)
	}

	status, _, acc := do(t, "POST", srv.URL+"/api/sessions/p1/events", testAPIKey, "", `{"data":{"text":"first"}}`)
	if status != 202 {
		t.Fatalf("POST: %d %v", status, acc)
	}
	<-ag.started

	deep := func(n int) string { return strings.Repeat(`{"a":`, n-1) + `{}` + strings.Repeat(`}`, n-1) }
	poison := map[string]string{ // data → the rule that refuses it
		deep(9998): agent.RuleDepth,
		`{"a":` + strings.Repeat(`[`, 20000) + strings.Repeat(`]`, 20000) + `}`: agent.RuleDepth, // past encoding/json's own limit
		`{"text":"\ud800"}`:              agent.RuleSurrogate,
		`{"n":1e200000}`:                 agent.RuleNumber,
		`{"text":"a\u0000"}`:             agent.RuleNUL,
		`{"text":"\udc00\ud800"}`:        agent.RuleSurrogate,
		`{"n":0e-99999,"text":"ok"}`:     agent.RuleNumber,
		`{"n":123456789e301,"t":"fine"}`: agent.RuleNumber,
	}
	var seen []phxtest.SessionEvent // every session event the socket got
	for data, rule := range poison {
		status, _, body := do(t, "POST", srv.URL+"/api/sessions/p1/events", testAPIKey, "", `{"data":`+data+`,"idempotency_key":"k"}`)
		if msg, _ := body["message"].(string); status != 422 || body["error"] != CodeInvalidInput || !strings.Contains(msg, "input rule "+rule+":") {
			t.Fatalf("POST data %.60s: %d %v, want 422 invalid_input naming %s", data, status, body, rule)
		}
		if len(data) > 1000 {
			continue // a push this deep passes no frame decoder (nesting over 512 closes the socket with 1007)
		}
		ref := ws.Send(joinRef, "session:p1", "message", json.RawMessage(`{"data":`+data+`}`))
		f, evs := ws.Until(ref)
		var reply struct {
			Status   string
			Response struct{ Reason, Message string }
		}
		_ = json.Unmarshal(f.Payload, &reply)
		if reply.Status != "error" || reply.Response.Reason != CodeInvalidInput || !strings.Contains(reply.Response.Message, "input rule "+rule+":") {
			t.Fatalf("push data %.60s: %s, want an invalid_input error naming %s", data, f.Payload, rule)
		}
		seen = append(seen, evs...)
	}

	close(ag.release)
	seen = append(seen, ws.EventsUntil(agent.TypeTurnCompleted)...)
	for _, ev := range seen {
		if ev.Type == agent.TypeUserEvent && ev.Seq != 1 {
			t.Fatalf("a refused input was published: %+v", ev)
		}
		var msg agent.Message
		if ev.Type == agent.TypeMessage && (json.Unmarshal(ev.Data, &msg) != nil || msg.Content != "a\uFFFDb") {
			t.Fatalf("reply published as %s, want U+0000 replaced by U+FFFD", ev.Data)
		}
	}
	if tr.Count(trace.Kind("session.standdown")) != 0 {
		t.Fatalf("the session stood down:\n%s", tr.Dump())
	}
	_, _, view := do(t, "GET", srv.URL+"/api/sessions/p1", testAPIKey, "", "")
	hist, _ := view["history"].([]any)
	if len(hist) != 2 || view["seq"] != float64(5) {
		t.Fatalf("session after the turn = %v, want 2 messages at seq 5 (user_event, turn_started, delta, message, turn_completed)", view)
	}
	if reply, _ := hist[1].(map[string]any); reply["content"] != "a\uFFFDb" {
		t.Fatalf("checkpointed reply %v, want U+FFFD in place of U+0000", hist[1])
	}
}
