package session

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/trace"
)

// causeAgent is a blockAgent that records its turns' context causes.
func causeAgent() (*blockAgent, chan error) {
	ba := newBlockAgent()
	causes := make(chan error, 16)
	ba.onCancel = func(ctx context.Context) { causes <- context.Cause(ctx) }
	return ba, causes
}

func stop(t *testing.T, m *Manager, id string, turn agent.Position) ControlResult {
	t.Helper()
	out := m.Control(context.Background(), id, Control{Op: OpStop, Turn: turn})
	if out.Kind != OutcomeAccepted || out.Accepted.Control == nil {
		t.Fatalf("stop %v of %s: outcome %v, err %v", turn, id, out.Kind, out.Err)
	}
	return *out.Accepted.Control
}

// A stop of the running turn cancels the agent's context (cause
// ErrTurnStopped), ends the turn as turn_stopped with the partial reply,
// writes that reply to the history marked stopped, and takes the input out
// of the inbox; the next input runs with it in its history. A second stop
// of the same turn, a stop of an unknown turn and a stop of a finished
// turn change nothing and say not_running.
func TestStopRunningTurn(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		st := newStores(t)
		tr := trace.New()
		cfg, _, _ := testConfig(st, "a/1", tr)
		ba, causes := causeAgent()
		ba.pre = []string{"hello ", "wor"}
		cfg.Agent = ba
		m := startManager(t, cfg)

		acc := submit(t, m, "s1", "one")
		<-ba.started
		r := stop(t, m, "s1", acc.Pos())
		if !r.Stopped || r.Turn != acc.Pos() || r.Reason != "" {
			t.Fatalf("stop = %+v, want stopped %v", r, acc.Pos())
		}
		if err := <-causes; !errors.Is(err, agent.ErrTurnStopped) {
			t.Fatalf("agent's context cause = %v, want ErrTurnStopped", err)
		}
		evs := logEvents(t, st.log, "s1")
		want := []string{agent.TypeUserEvent, agent.TypeTurnStarted, agent.TypeDelta, agent.TypeDelta, agent.TypeTurnStopped}
		if got := types(evs); !reflect.DeepEqual(got, want) {
			t.Fatalf("log = %v, want %v", got, want)
		}
		assertJSON(t, evs[4].Data, `{"turn":{"epoch":1,"seq":1},"partial":"hello wor"}`)
		stored := loadStored(t, st.store, "s1")
		wantHist := []agent.Message{{Role: "user", Content: "one"}, {Role: "assistant", Content: "hello wor", Stopped: true}}
		if got := messages(stored.History); !reflect.DeepEqual(got, wantHist) || len(stored.Inbox) != 0 {
			t.Fatalf("stored history %+v inbox %d, want %+v and an empty inbox", got, len(stored.Inbox), wantHist)
		}

		for _, p := range []agent.Position{acc.Pos(), {Epoch: 9, Seq: 9}} {
			if r := stop(t, m, "s1", p); r.Stopped || r.Reason != ReasonNotRunning || r.Running != nil {
				t.Fatalf("stop %v after the turn ended = %+v, want not_running, nothing running", p, r)
			}
		}

		close(ba.release)
		acc2 := submit(t, m, "s1", "two")
		turn := <-ba.started
		if !reflect.DeepEqual(turn.History, wantHist) {
			t.Fatalf("next turn's history = %+v, want %+v", turn.History, wantHist)
		}
		waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 1)
		if r := stop(t, m, "s1", acc2.Pos()); r.Stopped || r.Reason != ReasonNotRunning {
			t.Fatalf("stop of a completed turn = %+v, want not_running", r)
		}
		if s := m.Stats(); s.TurnsStopped != 1 || s.TurnsCompleted != 1 {
			t.Fatalf("stats = %+v, want 1 stopped, 1 completed", s)
		}
	})
}

// A stop names one turn: a stop of a queued input (not yet running) says
// not_running and names the running turn, which runs on.
func TestStopQueuedTurnIsNoop(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, _, _ := testConfig(st, "a/1", tr)
	ba := newBlockAgent()
	cfg.Agent = ba
	m := startManager(t, cfg)
	first := submit(t, m, "s1", "one")
	<-ba.started
	second := submit(t, m, "s1", "two")
	r := stop(t, m, "s1", second.Pos())
	if r.Stopped || r.Reason != ReasonNotRunning || r.Running == nil || *r.Running != first.Pos() {
		t.Fatalf("stop of the queued input = %+v, want not_running with running %v", r, first.Pos())
	}
	close(ba.release)
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 2)
	if s := m.Stats(); s.TurnsStopped != 0 {
		t.Fatalf("stats = %+v, want nothing stopped", s)
	}
}

// Double texting, reject: an input marked reject while a turn runs is
// refused with the running turn's position; nothing is accepted (no
// user_event, no seq used). Without a turn running it is accepted.
func TestDoubleTextingReject(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		st := newStores(t)
		tr := trace.New()
		cfg, _, _ := testConfig(st, "a/1", tr)
		ba := newBlockAgent()
		cfg.Agent = ba
		cfg.DoubleTexting = MultitaskReject // the default mode
		m := startManager(t, cfg)
		first := submit(t, m, "s1", "one")
		<-ba.started
		in := textInput("two", "k2")
		_, err := m.Accept(context.Background(), "s1", in)
		var busy *TurnBusyError
		if !errors.As(err, &busy) || busy.Turn != first.Pos() || !errors.Is(err, ErrTurnBusy) {
			t.Fatalf("accept while running = %v, want TurnBusyError naming %v", err, first.Pos())
		}
		in.Multitask = MultitaskEnqueue // the event's mode wins over the default
		queued, err := m.Accept(context.Background(), "s1", in)
		if err != nil {
			t.Fatalf("enqueue while running: %v", err)
		}
		if got := types(logEvents(t, st.log, "s1")); !reflect.DeepEqual(got, []string{agent.TypeUserEvent, agent.TypeTurnStarted, agent.TypeUserEvent}) {
			t.Fatalf("log = %v: the rejected input left a trace", got)
		}
		if queued.Seq != 3 {
			t.Fatalf("queued input at %v, want seq 3 (the refusal used none)", queued.Pos())
		}
		close(ba.release)
		waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 2)
		if stored := loadStored(t, st.store, "s1"); len(stored.History) != 4 {
			t.Fatalf("history %+v, want two whole turns", stored.History)
		}
	})
}

// Double texting, interrupt: the input is accepted, the running turn ends
// turn_stopped with its partial reply, then the input runs with that
// partial reply (marked stopped) in its history.
func TestDoubleTextingInterrupt(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		st := newStores(t)
		tr := trace.New()
		cfg, _, _ := testConfig(st, "a/1", tr)
		ba, causes := causeAgent()
		ba.pre = []string{"par", "tial"}
		cfg.Agent = ba
		m := startManager(t, cfg)
		submit(t, m, "s1", "one")
		<-ba.started
		in := textInput("two", "")
		in.Multitask = MultitaskInterrupt
		if _, err := m.Accept(context.Background(), "s1", in); err != nil {
			t.Fatalf("interrupting input: %v", err)
		}
		if err := <-causes; !errors.Is(err, agent.ErrTurnStopped) {
			t.Fatalf("cause = %v, want ErrTurnStopped", err)
		}
		next := <-ba.started
		want := []agent.Message{{Role: "user", Content: "one"}, {Role: "assistant", Content: "partial", Stopped: true}}
		if !reflect.DeepEqual(next.History, want) || agent.InputText(next.Input) != "two" {
			t.Fatalf("next turn %q saw %+v, want two with %+v", agent.InputText(next.Input), next.History, want)
		}
		if next.Input.Multitask != "" {
			t.Fatalf("the turn's input kept multitask %q; it is not stored", next.Input.Multitask)
		}
		close(ba.release)
		waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 1)
		got := strings.Join(types(logEvents(t, st.log, "s1")), " ")
		const wantLog = "user_event turn_started delta delta user_event turn_stopped turn_started delta delta message turn_completed"
		if got != wantLog {
			t.Fatalf("log = %s\nwant  %s", got, wantLog)
		}
	})
}

// A stop that reaches the new owner after a takeover stops the resumed
// turn there: the old owner, frozen mid-turn, lost its lease; the stop
// thaws the session on the new owner (which resumes the turn first) and
// stops it, and the partial reply holds the words of both epochs.
func TestStopAfterTakeoverStopsResumedTurn(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		st := newStores(t)
		tr := trace.New()
		cfgA, _, _ := testConfig(st, "a/1", tr)
		a := NewManager(cfgA)
		defer a.Close()
		at := trace.Kind("session.emit", "owner", "a/1", "type", agent.TypeDelta, "seq", int64(4))
		tr.Park(at, trace.Kind("session.exited", "owner", "b/1"))
		acc := submit(t, a, "s1", strings.Join(resumeWords, " "))
		waitFor(t, tr, at, 1)

		st.advance(t, cfgA.LeaseTTL+time.Second)
		cfgB, _, _ := testConfig(st, "b/1", tr)
		stalled := make(chan agent.Turn, 1)
		cfgB.Agent = stallEcho{after: 1, stalled: stalled}
		b := startManager(t, cfgB)
		done := make(chan ControlResult, 1)
		go func() {
			out := b.Control(context.Background(), "s1", Control{Op: OpStop, Turn: acc.Pos()})
			if out.Accepted.Control == nil {
				t.Errorf("stop on b: %v %v", out.Kind, out.Err)
				done <- ControlResult{}
				return
			}
			done <- *out.Accepted.Control
		}()
		r := <-done
		if !r.Stopped {
			// b's actor starts the resumed turn before it reads its
			// mailbox (schedule runs first), so the stop finds it running.
			t.Fatalf("stop on the new owner = %+v, want stopped", r)
		}
		stored := loadStored(t, st.store, "s1")
		last := stored.History[len(stored.History)-1]
		if !last.Stopped || !strings.HasPrefix(last.Content, "w01 w02 ") {
			t.Fatalf("stored reply %+v, want the partial reply of both epochs, stopped", last)
		}
		if s := b.Stats(); s.TurnsResumed != 1 || s.TurnsStopped != 1 {
			t.Fatalf("b stats %+v, want 1 resumed and stopped", s)
		}
		b.Close()
		waitFor(t, tr, trace.Kind("session.fenced", "owner", "a/1"), 1)
	})
}

// A session's first input sets its double-texting mode (its own multitask,
// which no running turn can apply to): a later input without multitask
// follows it, one with multitask overrides it for itself, and the mode is
// durable: the next owner applies it too. A later input's multitask sets
// nothing for the session.
func TestDoubleTextingSetByFirstInput(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		st := newStores(t)
		tr := trace.New()
		cfgA, _, _ := testConfig(st, "a/1", tr)
		ba := newBlockAgent()
		cfgA.Agent = ba
		a := NewManager(cfgA)
		defer a.Close()
		ctx := context.Background()

		first := textInput("one", "")
		first.Multitask = MultitaskReject
		acc, err := a.Accept(ctx, "s1", first)
		if err != nil {
			t.Fatalf("first input: %v", err)
		}
		<-ba.started
		var busy *TurnBusyError
		if _, err := a.Accept(ctx, "s1", textInput("two", "")); !errors.As(err, &busy) || busy.Turn != acc.Pos() {
			t.Fatalf("input without multitask while a turn runs: %v, want TurnBusyError naming %v (the session's mode)", err, acc.Pos())
		}
		queued := textInput("three", "")
		queued.Multitask = MultitaskEnqueue
		if _, err := a.Accept(ctx, "s1", queued); err != nil {
			t.Fatalf("input with multitask enqueue: %v", err)
		}
		if got, err := a.State(ctx, "s1", HistoryQuery{}); err != nil || got.DoubleTexting != MultitaskReject {
			t.Fatalf("s1 state on its owner: mode %q (%v), want %q (set by its first input)", got.DoubleTexting, err, MultitaskReject)
		}

		// Another session: its first input names no mode; a later one's
		// multitask is for itself only.
		submit(t, a, "s2", "one")
		<-ba.started
		rejecting := textInput("two", "")
		rejecting.Multitask = MultitaskReject
		if _, err := a.Accept(ctx, "s2", rejecting); !errors.Is(err, ErrTurnBusy) {
			t.Fatalf("s2 input with multitask reject: %v, want ErrTurnBusy", err)
		}
		submit(t, a, "s2", "three") // the default, enqueue
		if got, err := a.State(ctx, "s2", HistoryQuery{}); err != nil || got.DoubleTexting != MultitaskEnqueue {
			t.Fatalf("s2 state: mode %q (%v), want the node's default %q (its first input set none)", got.DoubleTexting, err, MultitaskEnqueue)
		}

		// The next owner thaws the mode with the session.
		a.Close()
		st.advance(t, cfgA.LeaseTTL+time.Second)
		cfgB, _, _ := testConfig(st, "b/1", tr)
		bb := newBlockAgent()
		cfgB.Agent = bb
		b := startManager(t, cfgB)
		// Before b runs it, the mode is read from the store.
		if got, err := b.State(ctx, "s1", HistoryQuery{}); err != nil || got.DoubleTexting != MultitaskReject || got.Source != SourceStore {
			t.Fatalf("s1 state from the store: mode %q source %q (%v), want %q from %q", got.DoubleTexting, got.Source, err, MultitaskReject, SourceStore)
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := b.Recover(rctx, 10); err != nil {
			t.Fatalf("recover: %v", err)
		}
		running := map[string]agent.Position{}
		for range 2 {
			turn := <-bb.started
			running[turn.Session] = turn.ID
		}
		if _, err := b.Accept(ctx, "s1", textInput("four", "")); !errors.As(err, &busy) || busy.Turn != running["s1"] {
			t.Fatalf("s1 input on the next owner: %v, want TurnBusyError naming %v", err, running["s1"])
		}
		if _, err := b.Accept(ctx, "s2", textInput("four", "")); err != nil {
			t.Fatalf("s2 input on the next owner: %v, want it enqueued", err)
		}
		close(bb.release)
	})
}

// A stop of a session never seen answers not_running and creates nothing:
// no lease is claimed, no session row is written, no actor starts. The
// session's first event then starts at epoch 1 as any new session does.
func TestStopOfUnknownSessionCreatesNothing(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		st := newStores(t)
		tr := trace.New()
		cfg, _, _ := testConfig(st, "a/1", tr)
		m := startManager(t, cfg)
		ctx := context.Background()
		if r := stop(t, m, "never", agent.Position{Epoch: 1, Seq: 1}); r.Stopped || r.Reason != ReasonNotRunning || r.Running != nil {
			t.Fatalf("stop in an unknown session = %+v, want not_running", r)
		}
		if n := tr.Count(trace.Kind("session.control.unknown", "session", "never")); n != 1 {
			t.Fatalf("answered as unknown %d times, want 1", n)
		}
		if _, ok, err := cfg.Leases.Get(ctx, "never"); err != nil || ok {
			t.Fatalf("lease after the stop: ok %v err %v, want none", ok, err)
		}
		if _, ok, err := cfg.Store.Read(ctx, "never", HistoryQuery{}); err != nil || ok {
			t.Fatalf("session row after the stop: ok %v err %v, want none", ok, err)
		}
		if len(m.Sessions()) != 0 {
			t.Fatalf("actors after the stop: %+v, want none", m.Sessions())
		}
		if acc := submit(t, m, "never", "hello"); acc.Epoch != 1 || acc.Seq != 1 {
			t.Fatalf("first event after the stop accepted at %+v, want 1-1", acc)
		}
	})
}
