package httpagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/session"
)

// waitClosed waits for ch to close (the server saw its request end).
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hangGuard):
		t.Fatalf("hang guard: %s", what)
	}
}

// hasType reports whether evs hold an event of typ.
func hasType(typ string) func([]agent.Event) bool {
	return func(evs []agent.Event) bool { return slices.Contains(types(evs), typ) }
}

// A stop cancels the turn's ctx with agent.ErrTurnStopped: the HTTP
// agent closes the request (the server sees the disconnect), clients get
// turn_stopped with the partial reply, and the next turn's request carries
// the partial reply in its history marked stopped.
func TestStopClosesRequest(t *testing.T) {
	forEachStores(t, testStopClosesRequest)
}

func testStopClosesRequest(t *testing.T, st *stores) {
	closed := make(chan struct{})
	srv := newAgentServer(t, func(w http.ResponseWriter, r *http.Request, req Request) {
		var in struct{ Text string }
		json.Unmarshal(req.Input.Data, &in)
		if in.Text == "long" {
			sse(w, `{"type":"delta","data":{"text":"partial "}}`)
			<-r.Context().Done() // no end: only a close ends this request
			close(closed)
			return
		}
		okStream(w, r, req)
	})
	m := st.manager(t, "n1", newAgent(t, srv.URL, nil))
	acc := post(t, m, "s1", "long")
	st.rec.waitEvents(t, "s1", hasType(agent.TypeDelta))

	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	out := m.Control(ctx, "s1", session.Control{Op: session.OpStop, Turn: acc.Pos()})
	if out.Kind != session.OutcomeAccepted || out.Accepted.Control == nil || !out.Accepted.Control.Stopped {
		t.Fatalf("stop outcome %+v (control %+v), want stopped", out, out.Accepted.Control)
	}
	waitClosed(t, closed, "the agent's request was never closed after the stop")
	evs := st.rec.waitEvents(t, "s1", hasType(agent.TypeTurnStopped))
	if got, want := types(evs), []string{"user_event", "turn_started", "delta", "turn_stopped"}; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v%s", got, want, summary(evs))
	}
	var stopped struct {
		Turn    agent.Position `json:"turn"`
		Partial string         `json:"partial"`
	}
	json.Unmarshal(evs[3].Data, &stopped)
	if stopped.Turn != acc.Pos() || stopped.Partial != "partial " {
		t.Fatalf("turn_stopped %s", evs[3].Data)
	}

	post(t, m, "s1", "next")
	completedWith(t, lastTurn(st.rec.waitEvents(t, "s1", turnsEnded(1))), "hello world")
	reqs := srv.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	want := []HistoryMessage{{Role: "user", Content: "long"}, {Role: "assistant", Content: "partial ", Stopped: true}}
	if h := reqs[1].Req.History; !slices.Equal(h, want) {
		t.Fatalf("next request's history %+v, want %+v", h, want)
	}
}

// An interrupt event in the agent's stream ends the turn with the
// question: clients get it as the turn's last event (Relay reads nothing
// after it), the session waits on it, and the answer starts a
// continuation whose request carries the interrupt and the value in
// "answer", with the interrupt and (after it completes) the answer in the
// history of the turn after.
func TestInterruptAndContinuation(t *testing.T) {
	forEachStores(t, testInterruptAndContinuation)
}

func testInterruptAndContinuation(t *testing.T, st *stores) {
	srv := newAgentServer(t, func(w http.ResponseWriter, r *http.Request, req Request) {
		switch {
		case req.Answer != nil:
			var v string
			json.Unmarshal(req.Answer.Value, &v)
			sse(w, fmt.Sprintf(`{"type":"delta","data":{"text":"%s: "}}`, v), `{"type":"delta","data":{"text":"booked"}}`, `{"type":"done"}`)
		case req.Input.Type == "user_message" && string(req.Input.Data) == `{"text":"book it"}`:
			ndjson(w, `{"type":"delta","data":{"text":"Checking. "}}`,
				`{"type":"interrupt","data":{"id":"approve-1","kind":"approval","payload":{"choices":["yes","no"]},"expires_at":"2100-01-02T03:04:05Z","turn":"ignored"}}`,
				`{"type":"delta","data":{"text":"never read"}}`, `{"type":"done"}`)
		default:
			okStream(w, r, req)
		}
	})
	m := st.manager(t, "n1", newAgent(t, srv.URL, nil))
	acc := post(t, m, "s1", "book it")
	evs := st.rec.waitEvents(t, "s1", hasType(agent.TypeInterrupt))
	if got, want := types(evs), []string{"user_event", "turn_started", "delta", "interrupt"}; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v%s", got, want, summary(evs))
	}
	var iv agent.Interrupt
	if err := json.Unmarshal(evs[3].Data, &iv); err != nil {
		t.Fatal(err)
	}
	if iv.ID != "approve-1" || iv.Kind != "approval" || string(iv.Payload) != `{"choices":["yes","no"]}` || iv.Turn != acc.Pos() ||
		iv.ExpiresAt == nil || !iv.ExpiresAt.Equal(time.Date(2100, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("interrupt %s", evs[3].Data)
	}

	// The answer starts the continuation.
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	answer := agent.Input{Type: agent.TypeResume, Data: json.RawMessage(`{"interrupt":"approve-1","value":"yes"}`)}
	if _, err := m.Accept(ctx, "s1", answer); err != nil {
		t.Fatalf("answer: %v", err)
	}
	evs = st.rec.waitEvents(t, "s1", turnsEnded(1))
	completedWith(t, lastTurn(evs), "yes: booked")
	if _, err := m.Accept(ctx, "s1", answer); !errors.Is(err, session.ErrInterruptAnswered) {
		t.Fatalf("second answer: %v, want ErrInterruptAnswered", err)
	}

	reqs := srv.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	cont := reqs[1].Req
	wantInfo := InterruptInfo{ID: "approve-1", Kind: "approval", Payload: json.RawMessage(`{"choices":["yes","no"]}`), ExpiresAt: iv.ExpiresAt, Turn: acc.Pos().String()}
	if a := cont.Answer; a == nil || string(a.Value) != `"yes"` || !sameInfo(a.Interrupt, wantInfo) {
		t.Fatalf("continuation answer %+v, want %+v with value \"yes\"", cont.Answer, wantInfo)
	}
	if cont.Input.Type != agent.TypeResume || len(cont.History) != 2 || cont.History[0] != (HistoryMessage{Role: "user", Content: "book it"}) ||
		cont.History[1].Role != agent.RoleInterrupt || cont.History[1].Interrupt == nil || !sameInfo(*cont.History[1].Interrupt, wantInfo) {
		t.Fatalf("continuation input %+v history %+v", cont.Input, cont.History)
	}

	// The turn after sees the answered interrupt in its history.
	post(t, m, "s1", "thanks")
	st.rec.waitEvents(t, "s1", turnsEnded(2))
	h := srv.requests()[2].Req.History
	if len(h) != 4 || h[2].Role != "user" || h[2].Answer == nil || h[2].Answer.Interrupt != "approve-1" || string(h[2].Answer.Value) != `"yes"` ||
		h[3] != (HistoryMessage{Role: "assistant", Content: "yes: booked"}) {
		t.Fatalf("history after the continuation %+v", h)
	}
}

func sameInfo(a, b InterruptInfo) bool {
	return a.ID == b.ID && a.Kind == b.Kind && string(a.Payload) == string(b.Payload) && a.Turn == b.Turn &&
		(a.ExpiresAt == nil) == (b.ExpiresAt == nil) && (a.ExpiresAt == nil || a.ExpiresAt.Equal(*b.ExpiresAt))
}

// An interrupt event that breaks the protocol (no id, a bad id, no kind,
// a bad expiry) fails the turn with a protocol error; the session does not
// wait on anything.
func TestInterruptEventRefused(t *testing.T) {
	cases := map[string]struct{ data, want string }{
		"no_id":      {`{"kind":"approval"}`, "id must be 1-128 characters"},
		"bad_id":     {`{"id":"a b","kind":"approval"}`, "id must be 1-128 characters"},
		"no_kind":    {`{"id":"x"}`, "kind must be a string of 1-64 bytes"},
		"bad_expiry": {`{"id":"x","kind":"k","expires_at":"tomorrow"}`, "an interrupt event needs data"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			srv := newAgentServer(t, func(w http.ResponseWriter, _ *http.Request, _ Request) {
				sse(w, `{"type":"interrupt","data":`+c.data+`}`)
			})
			st := newStores()
			m := st.manager(t, "n1", newAgent(t, srv.URL, nil))
			post(t, m, "s1", "hi")
			evs := st.rec.waitEvents(t, "s1", turnsEnded(1))
			failedWith(t, evs, c.want, ErrProtocol.Error())
			ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
			defer cancel()
			_, err := m.Accept(ctx, "s1", agent.Input{Type: agent.TypeResume, Data: json.RawMessage(`{"interrupt":"x","value":1}`)})
			if !errors.Is(err, session.ErrInterruptNotFound) {
				t.Fatalf("answer after a refused interrupt: %v, want ErrInterruptNotFound", err)
			}
		})
	}
}

// The request's history marks an interrupt entry with the parsed interrupt
// and only the first later user message answering that interrupt's id with
// the answer; a look-alike without an open interrupt, or naming another
// id, is a plain user message; stopped replies keep their mark.
func TestHistoryMarksInterruptsAndAnswers(t *testing.T) {
	iv := `{"id":"q1","kind":"approval","turn":{"epoch":2,"seq":5}}`
	in := []agent.Message{
		{Role: "user", Content: `{"interrupt":"q1","value":1}`}, // before any interrupt
		{Role: "assistant", Content: "par", Stopped: true},
		{Role: "interrupt", Content: iv},
		{Role: "user", Content: `{"interrupt":"other","value":2}`},
		{Role: "user", Content: `{"interrupt":"q1"}`},
		{Role: "user", Content: `{"interrupt":"q1","value":3}`}, // already answered
		{Role: "interrupt", Content: "not json"},
	}
	h := history(in)
	if len(h) != len(in) {
		t.Fatalf("%d entries, want %d", len(h), len(in))
	}
	for i, m := range h {
		if m.Role != in[i].Role || m.Content != in[i].Content || m.Stopped != in[i].Stopped {
			t.Fatalf("entry %d = %+v, want the message %+v", i, m, in[i])
		}
		wantAnswer := i == 4
		if (m.Answer != nil) != wantAnswer {
			t.Fatalf("entry %d answer %+v, want answer: %v", i, m.Answer, wantAnswer)
		}
		if wantInterrupt := i == 2; (m.Interrupt != nil) != wantInterrupt {
			t.Fatalf("entry %d interrupt %+v, want interrupt: %v", i, m.Interrupt, wantInterrupt)
		}
	}
	if a := h[4].Answer; a.Interrupt != "q1" || string(a.Value) != "null" {
		t.Fatalf("answer %+v, want q1 with value null", a)
	}
	if iv := h[2].Interrupt; iv.ID != "q1" || iv.Kind != "approval" || iv.Turn != "2-5" || string(iv.Payload) != "null" || iv.ExpiresAt != nil {
		t.Fatalf("interrupt %+v", iv)
	}
	if got := history(nil); got == nil || len(got) != 0 {
		t.Fatalf("history(nil) = %#v, want an empty, non-nil slice", got)
	}
}
