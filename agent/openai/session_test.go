package openai

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/session"
)

// published is a session.Publisher that keeps every event and signals
// each turn's end (turn_completed or turn_failed).
type published struct {
	mu     sync.Mutex
	events []agent.Event
	ends   chan agent.Event
}

func (p *published) Publish(_ context.Context, e agent.Event) error {
	p.mu.Lock()
	p.events = append(p.events, e)
	p.mu.Unlock()
	if e.Type == agent.TypeTurnCompleted || e.Type == agent.TypeTurnFailed {
		p.ends <- e
	}
	return nil
}

func (p *published) all() []agent.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]agent.Event(nil), p.events...)
}

// newSessionManager runs ag behind a session Manager on memory stores, as
// the gateway does (StorableOutput included).
func newSessionManager(t *testing.T, ag agent.Agent) (*session.Manager, *published) {
	t.Helper()
	pub := &published{ends: make(chan agent.Event, 16)}
	m := session.NewManager(session.Config{
		Owner:     "n1/test",
		Agent:     session.StorableOutput(ag),
		Leases:    session.NewMemoryLeaseStore(),
		Store:     session.NewMemorySessionStore(),
		Log:       session.NewMemoryReplayLog(1000, time.Hour),
		Publisher: pub,
	})
	t.Cleanup(m.Close)
	return m, pub
}

// submitTurn submits text to session id and waits for its turn's end.
func submitTurn(t *testing.T, m *session.Manager, pub *published, id, text string) agent.Event {
	t.Helper()
	out := m.Submit(context.Background(), id, textInput(text))
	if out.Kind != session.OutcomeAccepted {
		t.Fatalf("submit: %+v", out)
	}
	select {
	case e := <-pub.ends:
		return e
	case <-time.After(30 * time.Second): // hang guard
		t.Fatalf("no turn end; events %v", pub.all())
		return agent.Event{}
	}
}

// sessionEvents is the (type, data) of each event since from, data as
// published.
func sessionEvents(evs []agent.Event) []ev {
	out := make([]ev, len(evs))
	for i, e := range evs {
		out[i] = ev{Type: e.Type, Data: string(e.Data)}
	}
	return out
}

// TestThroughSession: each recorded stream, run as a session's turn by a
// real Manager, publishes the documented event sequence: user_event,
// turn_started, the agent's events, then message and turn_completed, or
// turn_failed whose error says what happened; and the session keeps
// working (a second turn completes).
func TestThroughSession(t *testing.T) {
	msg := func(s string) ev {
		d, _ := json.Marshal(agent.Message{Role: "assistant", Content: s})
		return ev{Type: agent.TypeMessage, Data: string(d)}
	}
	cases := []struct {
		name   string
		script []reply
		agent  []ev // the agent's own events
		end    []ev // what follows them
		errHas string
	}{
		{name: "plain text", script: []reply{{file: "plain.sse"}}, agent: plainDeltas,
			end: []ev{msg(plainText), {Type: agent.TypeTurnCompleted, Data: "{}"}}},
		{name: "tool call", script: []reply{{file: "tool_call.sse"}},
			agent: append(deltas("Let me check."), toolCallEv("call_Wx1", "get_weather", `{"city":"Paris"}`), toolCallEv("call_Yz2", "get_time", `{"tz":"Europe/Paris"}`)),
			end:   []ev{msg("Let me check."), {Type: agent.TypeTurnCompleted, Data: "{}"}}},
		{name: "error mid-stream", script: []reply{{file: "error_midstream.sse"}}, agent: deltas("The answer", " is"), errHas: "the provider reported an error mid-stream: Engine loop has died"},
		{name: "disconnect mid-stream", script: []reply{{file: "disconnect.sse", cut: true}}, agent: deltas("Once", " upon"), errHas: "the stream broke after 3 chunks: unexpected EOF"},
		{name: "500 before output, then the stream", script: []reply{{status: 500, body: `{"error":{"message":"busy"}}`}, {file: "plain.sse"}}, agent: plainDeltas,
			end: []ev{msg(plainText), {Type: agent.TypeTurnCompleted, Data: "{}"}}},
		{name: "no [DONE] after finish_reason", script: []reply{{file: "no_done.sse"}}, agent: deltas("Short", " reply."),
			end: []ev{msg("Short reply."), {Type: agent.TypeTurnCompleted, Data: "{}"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The second request of the scripts that do not retry is the
			// follow-up turn's: plain text.
			script := append(slices.Clone(c.script), reply{file: "plain.sse"})
			up := newUpstream(t, script...)
			m, pub := newSessionManager(t, testAgent(t, up.baseURL(), nil))
			end := submitTurn(t, m, pub, "s1", "hi")
			evs := pub.all()
			var types []string
			for _, e := range evs {
				types = append(types, e.Type)
			}
			if len(evs) < 2 || evs[0].Type != agent.TypeUserEvent || evs[1].Type != agent.TypeTurnStarted {
				t.Fatalf("events %v", types)
			}
			got := sessionEvents(evs[2:])
			if c.errHas != "" {
				var d struct{ Error string }
				_ = json.Unmarshal(end.Data, &d)
				if end.Type != agent.TypeTurnFailed || !strings.Contains(d.Error, c.errHas) {
					t.Fatalf("turn end %s %s, want turn_failed with %q", end.Type, end.Data, c.errHas)
				}
				got = got[:len(got)-1]
			} else if !slices.Equal(got[len(c.agent):], c.end) {
				t.Errorf("turn end:\n got %s\nwant %s", fmtEvs(got[len(c.agent):]), fmtEvs(c.end))
			}
			if !slices.Equal(got[:min(len(got), len(c.agent))], c.agent) || len(got) < len(c.agent) {
				t.Errorf("agent events:\n got %s\nwant %s", fmtEvs(got), fmtEvs(c.agent))
			}
			// The session keeps working: the next turn completes.
			if e := submitTurn(t, m, pub, "s1", "again"); e.Type != agent.TypeTurnCompleted {
				t.Fatalf("next turn ended %s %s", e.Type, e.Data)
			}
		})
	}
}

// TestSessionHistoryReachesTheModel: the second turn's request carries the
// first turn's input and reply, in order, then its own input.
func TestSessionHistoryReachesTheModel(t *testing.T) {
	up := newUpstream(t, reply{file: "plain.sse"}, reply{file: "tool_call.sse"})
	m, pub := newSessionManager(t, testAgent(t, up.baseURL(), func(c *Config) { c.SystemPrompt = "Be brief." }))
	if e := submitTurn(t, m, pub, "s2", "hello"); e.Type != agent.TypeTurnCompleted {
		t.Fatalf("first turn %s %s", e.Type, e.Data)
	}
	if e := submitTurn(t, m, pub, "s2", "weather in Paris?"); e.Type != agent.TypeTurnCompleted {
		t.Fatalf("second turn %s %s", e.Type, e.Data)
	}
	reqs := up.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	var body chatRequest
	if err := json.Unmarshal(reqs[1].body, &body); err != nil {
		t.Fatal(err)
	}
	want := []ChatMessage{{"system", "Be brief."}, {"user", "hello"}, {"assistant", plainText}, {"user", "weather in Paris?"}}
	if !reflect.DeepEqual(body.Messages, want) {
		t.Fatalf("second request's messages = %v, want %v", body.Messages, want)
	}
	st, err := m.State(context.Background(), "s2", session.HistoryQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(st.History); n != 4 {
		t.Fatalf("stored history has %d messages, want 4", n)
	}
}

// deltaPublisher is a published that also signals each delta.
type deltaPublisher struct {
	*published
	deltas chan struct{}
}

func (p deltaPublisher) Publish(ctx context.Context, e agent.Event) error {
	if err := p.published.Publish(ctx, e); err != nil {
		return err
	}
	if e.Type == agent.TypeDelta {
		p.deltas <- struct{}{}
	}
	return nil
}

// TestDrainedTurnRestartsOnTheNextOwner: an owner draining past its window
// in the middle of a streamed reply closes the provider's request (the
// server sees its client go away) and hands the turn over; the next owner
// on the same stores restarts it (turn_started, attempt 2: this backend is
// not a Resumer), asks the model again with the same messages, and the
// turn completes with the new reply alone.
func TestDrainedTurnRestartsOnTheNextOwner(t *testing.T) {
	up := newUpstream(t, reply{file: "disconnect.sse", hang: true}, reply{file: "plain.sse"})
	leases, store, log := session.NewMemoryLeaseStore(), session.NewMemorySessionStore(), session.NewMemoryReplayLog(1000, time.Hour)
	newManager := func(owner string, pub session.Publisher) *session.Manager {
		m := session.NewManager(session.Config{Owner: owner, Agent: session.StorableOutput(testAgent(t, up.baseURL(), nil)),
			Leases: leases, Store: store, Log: log, Publisher: pub})
		t.Cleanup(m.Close)
		return m
	}
	pub1 := deltaPublisher{&published{ends: make(chan agent.Event, 16)}, make(chan struct{}, 16)}
	m1 := newManager("n1/a", pub1)
	if out := m1.Submit(context.Background(), "s3", textInput("tell me a story")); out.Kind != session.OutcomeAccepted {
		t.Fatalf("submit: %+v", out)
	}
	for range 2 { // "Once", " upon"
		select {
		case <-pub1.deltas:
		case <-time.After(30 * time.Second): // hang guard
			t.Fatalf("no deltas; events %v", pub1.all())
		}
	}
	// A drain whose window is already over hands the running turn over.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = m1.Drain(ctx)
	select {
	case <-up.gone:
	case <-time.After(30 * time.Second): // hang guard
		t.Fatal("the provider never saw the drained turn's request close")
	}

	pub2 := &published{ends: make(chan agent.Event, 16)}
	m2 := newManager("n2/b", pub2)
	if n, err := m2.Recover(context.Background(), 10); err != nil || n != 1 {
		t.Fatalf("Recover = %d, %v", n, err)
	}
	select {
	case e := <-pub2.ends:
		if e.Type != agent.TypeTurnCompleted {
			t.Fatalf("turn ended %s %s", e.Type, e.Data)
		}
	case <-time.After(30 * time.Second): // hang guard
		t.Fatalf("no turn end on the next owner; events %v", pub2.all())
	}
	evs := pub2.all()
	var started struct {
		Attempt int
		From    *agent.Position
	}
	if evs[0].Type != agent.TypeTurnStarted || json.Unmarshal(evs[0].Data, &started) != nil || started.Attempt != 2 || started.From != nil {
		t.Fatalf("next owner's first event %s %s, want turn_started attempt 2", evs[0].Type, evs[0].Data)
	}
	want := append(slices.Clone(plainDeltas), ev{Type: agent.TypeMessage, Data: `{"role":"assistant","content":"` + plainText + `"}`}, ev{Type: agent.TypeTurnCompleted, Data: "{}"})
	if got := sessionEvents(evs[1:]); !slices.Equal(got, want) {
		t.Fatalf("next owner's events:\n got %s\nwant %s", fmtEvs(got), fmtEvs(want))
	}
	reqs := up.requests()
	if len(reqs) != 2 || string(reqs[0].body) != string(reqs[1].body) {
		t.Fatalf("%d requests; the restart must send the same messages:\n%s\n%s", len(reqs), reqs[0].body, reqs[len(reqs)-1].body)
	}
}
