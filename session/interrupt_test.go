package session

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/trace"
)

func askInput(text string) agent.Input {
	data, _ := json.Marshal(map[string]any{"text": text, "ask": true})
	return agent.Input{Type: "message", Data: data}
}

func answerInput(id string, value any, key string) agent.Input {
	v, _ := json.Marshal(value)
	data, _ := json.Marshal(map[string]json.RawMessage{"interrupt": json.RawMessage(`"` + id + `"`), "value": v})
	return agent.Input{Type: agent.TypeResume, Data: data, IdempotencyKey: key}
}

// The echo agent asked to ask ends its turn with an interrupt: the turn's
// last event, written to the history (role interrupt) before it is
// published. The first answer is accepted and its continuation turn gets
// the answer (Turn.Answer) and streams the text; a second answer is
// refused interrupt_answered, an answer to an unknown interrupt
// interrupt_not_found, a malformed one invalid_input. A re-sent answer with
// the same idempotency key is a duplicate, not a second answer.
func TestInterruptAnswerContinues(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		st := newStores(t)
		tr := trace.New()
		cfg, _, _ := testConfig(st, "a/1", tr)
		m := startManager(t, cfg)
		ctx := context.Background()

		acc, err := m.Accept(ctx, "s1", askInput("hello world"))
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeInterrupt), 1)
		evs := logEvents(t, st.log, "s1")
		if got := types(evs); !reflect.DeepEqual(got, []string{agent.TypeUserEvent, agent.TypeTurnStarted, agent.TypeInterrupt}) {
			t.Fatalf("log = %v", got)
		}
		assertJSON(t, evs[2].Data, `{"id":"ask-1-1","kind":"approval","payload":{"question":"Stream this reply?","choices":["approve","deny"],"text":"hello world"},"turn":{"epoch":1,"seq":1}}`)
		stored := loadStored(t, st.store, "s1")
		if len(stored.History) != 2 || stored.History[1].Role != agent.RoleInterrupt || len(stored.Inbox) != 0 {
			t.Fatalf("stored %+v, want the user message and the interrupt, empty inbox", stored)
		}
		if acc.Pos() != (agent.Position{Epoch: 1, Seq: 1}) {
			t.Fatalf("accepted at %v", acc.Pos())
		}

		if _, err := m.Accept(ctx, "s1", answerInput("nope", "approve", "")); !errors.Is(err, ErrInterruptNotFound) {
			t.Fatalf("answer to an unknown interrupt = %v, want ErrInterruptNotFound", err)
		}
		bad := agent.Input{Type: agent.TypeResume, Data: json.RawMessage(`{"value":1}`)}
		if _, err := m.Accept(ctx, "s1", bad); !errors.Is(err, agent.ErrInvalidInput) {
			t.Fatalf("malformed answer = %v, want ErrInvalidInput", err)
		}
		first, err := m.Accept(ctx, "s1", answerInput("ask-1-1", "approve", "a1"))
		if err != nil {
			t.Fatalf("first answer: %v", err)
		}
		if _, err := m.Accept(ctx, "s1", answerInput("ask-1-1", "deny", "a2")); !errors.Is(err, ErrInterruptAnswered) {
			t.Fatalf("second answer = %v, want ErrInterruptAnswered", err)
		}
		if dup, err := m.Accept(ctx, "s1", answerInput("ask-1-1", "approve", "a1")); err != nil || !dup.Duplicate || dup.Seq != first.Seq {
			t.Fatalf("re-sent first answer = %+v, %v; want its duplicate", dup, err)
		}
		waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 1)
		evs = logEvents(t, st.log, "s1")
		want := []string{agent.TypeUserEvent, agent.TypeTurnStarted, agent.TypeInterrupt, agent.TypeUserEvent, agent.TypeTurnStarted, agent.TypeDelta, agent.TypeDelta, agent.TypeMessage, agent.TypeTurnCompleted}
		if got := types(evs); !reflect.DeepEqual(got, want) {
			t.Fatalf("log = %v, want %v", got, want)
		}
		assertJSON(t, evs[3].Data, `{"type":"resume","data":{"interrupt":"ask-1-1","value":"approve"}}`)
		assertJSON(t, evs[7].Data, `{"role":"assistant","content":"hello world"}`)
		if s := m.Stats(); s.Interrupts != 1 || s.TurnsCompleted != 1 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// An interrupt raised on one owner is answered on the next: the first
// owner stops (its lease lapses, as after a kill), a second Manager on the
// same stores takes the answer, thaws the interrupt from the history, runs
// the continuation with Turn.Answer, and refuses a second answer.
func TestInterruptAnsweredAfterTakeover(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		st := newStores(t)
		tr := trace.New()
		cfgA, _, _ := testConfig(st, "a/1", tr)
		a := NewManager(cfgA)
		if _, err := a.Accept(context.Background(), "s1", askInput("one two")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, tr, trace.Kind("session.emit", "owner", "a/1", "type", agent.TypeInterrupt), 1)
		a.Close() // no hand-back: the lease lapses
		st.advance(t, cfgA.LeaseTTL+time.Second)

		cfgB, _, _ := testConfig(st, "b/1", tr)
		seen := make(chan *agent.InterruptAnswer, 1)
		cfgB.Agent = agentFunc(func(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error) {
			seen <- turn.Answer
			return EchoAgent{}.Run(ctx, turn, emit)
		})
		b := startManager(t, cfgB)
		acc, err := b.Accept(context.Background(), "s1", answerInput("ask-1-1", "deny", ""))
		if err != nil || acc.Epoch != 2 {
			t.Fatalf("answer on the new owner = %+v, %v; want accepted at epoch 2", acc, err)
		}
		ans := <-seen
		if ans == nil || ans.Interrupt.ID != "ask-1-1" || ans.Interrupt.Turn != (agent.Position{Epoch: 1, Seq: 1}) || string(ans.Value) != `"deny"` {
			t.Fatalf("continuation's Turn.Answer = %+v", ans)
		}
		waitFor(t, tr, trace.Kind("session.emit", "owner", "b/1", "type", agent.TypeTurnCompleted), 1)
		if _, err := b.Accept(context.Background(), "s1", answerInput("ask-1-1", "approve", "")); !errors.Is(err, ErrInterruptAnswered) {
			t.Fatalf("second answer = %v, want ErrInterruptAnswered", err)
		}
		hist := messages(loadStored(t, st.store, "s1").History)
		if last := hist[len(hist)-1]; last.Content != "(not approved)" {
			t.Fatalf("continuation reply %q, want (not approved)", last.Content)
		}
		// A third owner, thawing after the continuation completed, still
		// refuses a late answer.
		b.Close()
		st.advance(t, cfgA.LeaseTTL+time.Second)
		cfgC, _, _ := testConfig(st, "c/1", tr)
		c := startManager(t, cfgC)
		if _, err := c.Accept(context.Background(), "s1", answerInput("ask-1-1", "approve", "")); !errors.Is(err, ErrInterruptAnswered) {
			t.Fatalf("late answer on a third owner = %v, want ErrInterruptAnswered", err)
		}
	})
}

// An interrupt with expires_at ends with interrupt_expired when the
// Manager's clock passes it; an answer after that is refused
// interrupt_expired and nothing runs.
func TestInterruptExpires(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, _, clk := testConfig(st, "a/1", tr)
	exp := clk.Now().Add(time.Second)
	cfg.Agent = agentFunc(func(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error) {
		if turn.Answer != nil {
			t.Errorf("a continuation ran for an expired interrupt")
		}
		return agent.Message{}, emit(ctx, agent.TypeInterrupt, agent.Interrupt{ID: "q1", Kind: "pick", Payload: json.RawMessage(`["a","b"]`), ExpiresAt: &exp})
	})
	m := startManager(t, cfg)
	if _, err := m.Accept(context.Background(), "s1", textInput("which?", "")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeInterrupt), 1)
	clk.Advance(2 * time.Second)
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeInterruptExpired), 1)
	evs := logEvents(t, st.log, "s1")
	assertJSON(t, evs[len(evs)-1].Data, `{"interrupt":"q1","turn":{"epoch":1,"seq":1}}`)
	if _, err := m.Accept(context.Background(), "s1", answerInput("q1", "a", "")); !errors.Is(err, ErrInterruptExpired) {
		t.Fatalf("answer after expiry = %v, want ErrInterruptExpired", err)
	}
}

// An agent's interrupt must have a valid id and kind; after it, the turn
// may emit nothing more.
func TestInterruptEmitRules(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, _, _ := testConfig(st, "a/1", tr)
	errs := make(chan [3]error, 1)
	cfg.Agent = agentFunc(func(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error) {
		var out [3]error
		out[0] = emit(ctx, agent.TypeInterrupt, map[string]string{"id": "bad id!", "kind": "x"})
		_ = emit(ctx, agent.TypeInterrupt, map[string]string{"id": "ok", "kind": "x"})
		out[1] = emit(ctx, agent.TypeDelta, deltaData{Text: "late"})
		out[2] = emit(ctx, agent.TypeInterruptExpired, map[string]string{})
		errs <- out
		return agent.Message{}, nil
	})
	m := startManager(t, cfg)
	if _, err := m.Accept(context.Background(), "s1", textInput("x", "")); err != nil {
		t.Fatal(err)
	}
	out := <-errs
	for i, err := range out {
		if err == nil {
			t.Fatalf("emit %d accepted, want refused", i)
		}
	}
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeInterrupt), 1)
}

// An interrupt its owner expired is not expired again by the next owner:
// owner A publishes interrupt_expired and stops; B thaws the interrupt past
// its expires_at, finds the expiry in the replay log's tail, and publishes
// none (the log holds one interrupt_expired); an answer is still refused
// interrupt_expired there.
func TestInterruptExpiredOnceAcrossTakeover(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		st := newStores(t)
		tr := trace.New()
		cfgA, _, clkA := testConfig(st, "a/1", tr)
		exp := clkA.Now().Add(time.Second)
		asking := agentFunc(func(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error) {
			if agent.InputText(turn.Input) == "which?" {
				return agent.Message{}, emit(ctx, agent.TypeInterrupt, agent.Interrupt{ID: "q1", Kind: "pick", ExpiresAt: &exp})
			}
			return EchoAgent{}.Run(ctx, turn, emit)
		})
		cfgA.Agent = asking
		a := NewManager(cfgA)
		if _, err := a.Accept(context.Background(), "s1", textInput("which?", "")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, tr, trace.Kind("session.emit", "owner", "a/1", "type", agent.TypeInterrupt), 1)
		clkA.Advance(2 * time.Second)
		waitFor(t, tr, trace.Kind("session.emit", "owner", "a/1", "type", agent.TypeInterruptExpired), 1)
		a.Close()
		st.advance(t, cfgA.LeaseTTL+time.Second)

		cfgB, _, clkB := testConfig(st, "b/1", tr)
		cfgB.Agent = asking
		clkB.Advance(exp.Sub(clkB.Now()) + time.Second) // B's clock is past expires_at too
		b := startManager(t, cfgB)
		if _, err := b.Accept(context.Background(), "s1", answerInput("q1", "a", "")); !errors.Is(err, ErrInterruptExpired) {
			t.Fatalf("answer on the next owner = %v, want ErrInterruptExpired", err)
		}
		if got := tr.Count(trace.Kind("session.interrupt.thawed", "owner", "b/1", "interrupt", "q1", "expired", true)); got != 1 {
			t.Fatalf("b/1 thawed q1 as expired %d times, want 1 (the log's tail names its expiry)", got)
		}
		// A turn on B goes through its actor after any expiry B could fire.
		if _, err := b.Accept(context.Background(), "s1", textInput("next", "")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, tr, trace.Kind("session.emit", "owner", "b/1", "type", agent.TypeTurnCompleted), 1)
		n := 0
		for _, ev := range logEvents(t, st.log, "s1") {
			if ev.Type == agent.TypeInterruptExpired {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("the log holds %d interrupt_expired, want 1", n)
		}
	})
}
