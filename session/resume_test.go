package session

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/trace"
)

// resumeWords is the input of the resume tests: ten distinct words, so a
// lost or repeated one shows in the concatenated deltas.
var resumeWords = strings.Fields("w01 w02 w03 w04 w05 w06 w07 w08 w09 w10")

// stallEcho is the echo agent, resumable, that stops after emitting after
// words in one run: it reports the run on stalled and blocks until ctx
// ends (a turn longer than the drain window).
type stallEcho struct {
	after   int
	stalled chan agent.Turn
}

func (s stallEcho) Resumable() bool { return true }

func (s stallEcho) Run(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error) {
	words := strings.Fields(agent.InputText(turn.Input))
	if turn.Resume != nil {
		words = words[len(strings.Fields(turn.Resume.Text)):]
	}
	for i, w := range words {
		if i == s.after {
			s.stalled <- turn
			<-ctx.Done()
			return agent.Message{}, ctx.Err()
		}
		if err := emit(ctx, agent.TypeDelta, deltaData{Text: w + " "}); err != nil {
			return agent.Message{}, err
		}
	}
	return agent.Message{Role: "assistant", Content: agent.InputText(turn.Input)}, nil
}

// assertResumedOnce checks the replay log of a turn that ran at epoch 1 and
// was resumed at epoch 2: the deltas of both epochs concatenate to every
// word once, in order; epoch 2 starts with turn_resumed (turn = the input,
// attempt 2, from = epoch 1's last delta) carrying Prev = epoch 1's last
// event; the final message and the stored history hold the whole reply;
// the inbox is empty.
func assertResumedOnce(t *testing.T, st *stores, id string, input agent.Position, k int) {
	t.Helper()
	evs := logEvents(t, st.log, id)
	var deltas strings.Builder
	var resumed []agent.Event
	var lastOld agent.Event
	for _, ev := range evs {
		switch {
		case ev.Epoch == 1:
			lastOld = ev
		case ev.Type == agent.TypeTurnResumed:
			resumed = append(resumed, ev)
		}
		if ev.Type == agent.TypeDelta {
			var d deltaData
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			deltas.WriteString(d.Text)
		}
	}
	if got, want := deltas.String(), strings.Join(resumeWords, " ")+" "; got != want {
		t.Fatalf("deltas across both epochs = %q, want every word once: %q\nlog: %v", got, want, types(evs))
	}
	if n := countType(evs, agent.TypeDelta, 1); n != k {
		t.Fatalf("epoch 1 emitted %d deltas, want %d", n, k)
	}
	if len(resumed) != 1 {
		t.Fatalf("%d turn_resumed events, want 1: %v", len(resumed), types(evs))
	}
	var d turnData
	if err := json.Unmarshal(resumed[0].Data, &d); err != nil || d.Turn != input || d.Attempt != 2 || d.From == nil || *d.From != lastOld.Pos() {
		t.Fatalf("turn_resumed data = %s, want turn %v attempt 2 from %v", resumed[0].Data, input, lastOld.Pos())
	}
	first := firstOfEpoch(evs, 2)
	if first.Type != agent.TypeTurnResumed || first.Prev == nil || *first.Prev != lastOld.Pos() {
		t.Fatalf("epoch 2's first event = %s prev %v, want turn_resumed with prev %v", first.Type, first.Prev, lastOld.Pos())
	}
	msgs := ofType(evs, agent.TypeMessage)
	if len(msgs) != 1 || msgs[0].Epoch != 2 {
		t.Fatalf("message events = %v, want one at epoch 2", msgs)
	}
	var m agent.Message
	_ = json.Unmarshal(msgs[0].Data, &m)
	whole := strings.Join(resumeWords, " ")
	if m.Content != whole {
		t.Fatalf("final message = %q, want the whole reply %q", m.Content, whole)
	}
	stored := loadStored(t, st.store, id)
	want := []agent.Message{{Role: "user", Content: whole}, {Role: "assistant", Content: whole}}
	if !reflect.DeepEqual(messages(stored.History), want) || len(stored.Inbox) != 0 {
		t.Fatalf("stored = %+v, want %v and an empty inbox", stored, want)
	}
	// Replay from before the takeover recovers across the epoch seam.
	rr, err := Replay(context.Background(), st.log, id, agent.Position{}, 0, nil)
	if err != nil || !rr.Recovered {
		t.Fatalf("replay from the start: recovered %v (%s), %v", rr.Recovered, rr.Reason, err)
	}
}

func countType(evs []agent.Event, typ string, epoch int64) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == typ && ev.Epoch == epoch {
			n++
		}
	}
	return n
}

func ofType(evs []agent.Event, typ string) []agent.Event {
	var out []agent.Event
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func firstOfEpoch(evs []agent.Event, epoch int64) agent.Event {
	for _, ev := range evs {
		if ev.Epoch == epoch {
			return ev
		}
	}
	return agent.Event{}
}

// An owner abandoned mid-turn (its actor parked right after its k-th
// delta, as a kill -9 would freeze it) loses its lease; a second Manager
// on the same stores thaws the session and resumes the turn from the next
// word: across both epochs every word is emitted exactly once, and the
// final message carries the whole reply. The abandoned owner, released,
// is fenced at its next delta.
func TestResumeAfterOwnerAbandonedMidTurn(t *testing.T) {
	for _, k := range []int{0, 1, 4, 9} {
		t.Run(fmt.Sprintf("after_%d_deltas", k), func(t *testing.T) {
			forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
				st := newStores(t)
				tr := trace.New()
				cfgA, _, _ := testConfig(st, "a/1", tr)
				a := NewManager(cfgA)
				defer a.Close()
				// user_event is seq 1, turn_started seq 2, the k-th delta seq 2+k.
				at := trace.Kind("session.emit", "owner", "a/1", "type", agent.TypeTurnStarted)
				if k > 0 {
					at = trace.Kind("session.emit", "owner", "a/1", "type", agent.TypeDelta, "seq", int64(2+k))
				}
				tr.Park(at, trace.Kind("session.emit", "owner", "b/1", "type", agent.TypeTurnCompleted))
				acc := submit(t, a, "s1", strings.Join(resumeWords, " "))
				waitFor(t, tr, at, 1)

				st.advance(t, cfgA.LeaseTTL+time.Second) // a/1's lease lapses
				cfgB, _, _ := testConfig(st, "b/1", tr)
				b := startManager(t, cfgB)
				if n, err := b.Recover(context.Background(), 10); err != nil || n != 1 {
					t.Fatalf("recover = %d, %v; want 1", n, err)
				}
				waitFor(t, tr, trace.Kind("session.emit", "owner", "b/1", "type", agent.TypeTurnCompleted), 1)
				assertResumedOnce(t, st, "s1", acc.Pos(), k)
				if s := b.Stats(); s.TurnsResumed != 1 || s.TurnsCompleted != 1 {
					t.Fatalf("b stats = %+v, want 1 resumed, 1 completed", s)
				}
				waitFor(t, tr, trace.Kind("session.fenced", "owner", "a/1"), 1)
				assertNoParkFailures(t, tr)
				assertResumedOnce(t, st, "s1", acc.Pos(), k) // the fenced owner added nothing
			})
		})
	}
}

// Drain hands over, never drops: a turn longer than the drain window is
// halted when the window ends WITHOUT leaving the inbox (no turn_failed),
// the lease is released at once, and a second Manager claims the session
// at the next epoch and resumes the turn to completion, every word once.
func TestDrainHandsOverTurnPastWindow(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		st := newStores(t)
		tr := trace.New()
		cfgA, recA, _ := testConfig(st, "a/1", tr)
		const k = 3
		ag := stallEcho{after: k, stalled: make(chan agent.Turn, 1)}
		cfgA.Agent = ag
		a := startManager(t, cfgA)
		ctx := context.Background()
		acc := submit(t, a, "s1", strings.Join(resumeWords, " "))
		<-ag.stalled

		dctx, cancel := context.WithCancel(ctx)
		drained := make(chan error, 1)
		go func() { drained <- a.Drain(dctx) }()
		waitFor(t, tr, trace.Kind("session.drain"), 1)
		cancel() // the drain window ends with the turn still running
		if err := <-drained; err != nil {
			t.Fatalf("drain = %v, want nil: a hand-over is not a failure", err)
		}
		waitFor(t, tr, trace.Kind("session.drain.handover", "turns", uint64(1)), 1)
		if got, want := types(recA.all()), []string{agent.TypeUserEvent, agent.TypeTurnStarted, agent.TypeDelta, agent.TypeDelta, agent.TypeDelta}; !reflect.DeepEqual(got, want) {
			t.Fatalf("a published %v, want %v (no turn end)", got, want)
		}
		if s := a.Stats(); s.HandOvers != 1 || s.TurnsFailed != 0 || s.StandDowns != 0 {
			t.Fatalf("a stats = %+v, want 1 hand-over, no failed turn, no stand-down", s)
		}
		stored := loadStored(t, st.store, "s1")
		if len(stored.Inbox) != 1 || stored.Inbox[0].Pos() != acc.Pos() || stored.Inbox[0].Attempts != 1 || len(stored.History) != 0 {
			t.Fatalf("stored after the drain = %+v, want the input in the inbox (1 attempt) and no history", stored)
		}
		if l, _, _ := st.leases.Get(ctx, "s1"); l.Remaining > 0 {
			t.Fatalf("lease still live after drain: %+v", l)
		}

		cfgB, _, _ := testConfig(st, "b/1", tr)
		b := startManager(t, cfgB)
		if n, err := b.Recover(ctx, 10); err != nil || n != 1 {
			t.Fatalf("recover = %d, %v; want 1 (the lease was handed back)", n, err)
		}
		waitFor(t, tr, trace.Kind("session.emit", "owner", "b/1", "type", agent.TypeTurnCompleted), 1)
		assertResumedOnce(t, st, "s1", acc.Pos(), k)
	})
}

// An agent that cannot resume has the unfinished turn restarted: a new
// turn_started with attempt 2 and no Turn.Resume. A turn whose owners all
// die gets MaxTurnAttempts runs, then ends as turn_failed and leaves the
// inbox, even when the replay log lost its journal (the count is in the
// session store).
func TestUnresumableTurnRestartsThenGivesUp(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	for i, owner := range []string{"a/1", "b/1", "c/1"} {
		cfg, _, _ := testConfig(st, owner, tr)
		cfg.MaxTurnAttempts = 3
		cfg.Log = NewMemoryReplayLog(10_000, 0) // the journal is lost at every takeover
		ag := newBlockAgent()
		cfg.Agent = ag
		m := NewManager(cfg)
		if i == 0 {
			submit(t, m, "s1", "poison")
		} else if n, err := m.Recover(context.Background(), 10); err != nil || n != 1 {
			t.Fatalf("%s recover = %d, %v", owner, n, err)
		}
		turn := <-ag.started
		if turn.Resume != nil {
			t.Fatalf("%s: an unresumable agent got Resume %+v", owner, turn.Resume)
		}
		ev := waitFor(t, tr, trace.Kind("session.turn.start", "owner", owner), 1)
		if got := ev.Get("attempt"); got != i+1 {
			t.Fatalf("%s runs attempt %v, want %d", owner, got, i+1)
		}
		m.Close() // dies mid-turn
		st.advance(t, cfg.LeaseTTL+time.Second)
	}
	cfg, rec, _ := testConfig(st, "d/1", tr)
	d := startManager(t, cfg)
	if n, err := d.Recover(context.Background(), 10); err != nil || n != 1 {
		t.Fatalf("recover = %d, %v", n, err)
	}
	waitFor(t, tr, trace.Kind("session.emit", "owner", "d/1", "type", agent.TypeTurnFailed), 1)
	if got := types(rec.all()); !reflect.DeepEqual(got, []string{agent.TypeTurnFailed}) {
		t.Fatalf("d published %v, want only turn_failed", got)
	}
	stored := loadStored(t, st.store, "s1")
	if len(stored.Inbox) != 0 || !reflect.DeepEqual(messages(stored.History), []agent.Message{{Role: "user", Content: "poison"}}) {
		t.Fatalf("stored = %+v, want the input out of the inbox with its user message", stored)
	}
	if s := d.Stats(); s.TurnsGivenUp != 1 || s.TurnsFailed != 1 {
		t.Fatalf("d stats = %+v", s)
	}
}

// The gateway wraps its agent in StorableOutput; the wrapper resumes
// exactly when the agent it wraps does.
func TestStorableOutputKeepsResumable(t *testing.T) {
	if !resumable(StorableOutput(EchoAgent{})) {
		t.Error("StorableOutput(EchoAgent) does not resume")
	}
	if resumable(StorableOutput(newBlockAgent())) {
		t.Error("StorableOutput of an agent without Resumer resumes")
	}
}

// A resumable agent whose turn's journal the replay log lost (here the new
// owner's log is empty, as after Redis lost its data) restarts the turn as
// attempt 2 with a new turn_started: the whole reply is streamed again at
// the new epoch and stored once; the count came from the session store.
func TestResumeRestartsWhenJournalLost(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfgA, _, _ := testConfig(st, "a/1", tr)
	a := NewManager(cfgA)
	defer a.Close()
	at := trace.Kind("session.emit", "owner", "a/1", "type", agent.TypeDelta, "seq", int64(4))
	tr.Park(at, trace.Kind("session.emit", "owner", "b/1", "type", agent.TypeTurnCompleted))
	acc := submit(t, a, "s1", strings.Join(resumeWords, " "))
	waitFor(t, tr, at, 1)

	st.advance(t, cfgA.LeaseTTL+time.Second)
	cfgB, recB, _ := testConfig(st, "b/1", tr)
	cfgB.Log = NewMemoryReplayLog(10_000, 0) // the journal is gone
	b := startManager(t, cfgB)
	if n, err := b.Recover(context.Background(), 10); err != nil || n != 1 {
		t.Fatalf("recover = %d, %v", n, err)
	}
	waitFor(t, tr, trace.Kind("session.emit", "owner", "b/1", "type", agent.TypeTurnCompleted), 1)
	evs := recB.all()
	if evs[0].Type != agent.TypeTurnStarted || evs[0].Prev == nil || *evs[0].Prev != (agent.Position{Epoch: 1, Seq: 1}) {
		t.Fatalf("b's first event = %s prev %v, want turn_started with prev at the stored 1-1", evs[0].Type, evs[0].Prev)
	}
	var d turnData
	if err := json.Unmarshal(evs[0].Data, &d); err != nil || d.Turn != acc.Pos() || d.Attempt != 2 || d.From != nil {
		t.Fatalf("turn_started data = %s, want turn %v attempt 2", evs[0].Data, acc.Pos())
	}
	if n := len(ofType(evs, agent.TypeDelta)); n != len(resumeWords) {
		t.Fatalf("b streamed %d deltas, want all %d again", n, len(resumeWords))
	}
	whole := strings.Join(resumeWords, " ")
	if s := loadStored(t, st.store, "s1"); !reflect.DeepEqual(messages(s.History), []agent.Message{{Role: "user", Content: whole}, {Role: "assistant", Content: whole}}) {
		t.Fatalf("history = %v", s.History)
	}
	if s := b.Stats(); s.TurnsRestarted != 1 || s.TurnsResumed != 0 {
		t.Fatalf("b stats = %+v, want 1 restart", s)
	}
	waitFor(t, tr, trace.Kind("session.fenced", "owner", "a/1"), 1)
	assertNoParkFailures(t, tr)
}
