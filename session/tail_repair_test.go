package session

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/trace"
)

// assertContiguous fails unless the log's seqs run 1, 2, 3, … with no
// hole and no repeat, across epochs too, and positions only grow.
func assertContiguous(t *testing.T, evs []agent.Event) {
	t.Helper()
	assertIncreasing(t, evs)
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("log seq %d at index %d (a hole or a step back); log: %v", ev.Seq, i, positions(evs))
		}
	}
}

func positions(evs []agent.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Pos().String() + " " + ev.Type
	}
	return out
}

// An accepted input whose owner stopped after its inbox write landed but
// before its user_event was logged (here the write is made straight to the
// store, as the dead owner made it) is logged by the next owner at the
// position its 202 named, before anything of the new epoch: the log has no
// hole, the new epoch's first event names it as prev, and its turn runs.
func TestThawRelogsAcceptedUserEvent(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		st := newStores(t)
		tr := trace.New()
		ctx := context.Background()
		cfgA, _, _ := testConfig(st, "a/1", tr)
		a := startManager(t, cfgA)
		submit(t, a, "s1", "one two")
		waitFor(t, tr, trace.Kind("session.emit", "owner", "a/1", "type", agent.TypeTurnCompleted), 1)
		top := logEvents(t, st.log, "s1")
		last := top[len(top)-1].Pos()

		// a/1 writes the next input's inbox entry, then dies.
		lost := agent.Position{Epoch: last.Epoch, Seq: last.Seq + 1}
		in := textInput("three four", "k-lost")
		if err := st.store.Accept(ctx, "s1", last.Epoch, InboxEntry{Epoch: lost.Epoch, Seq: lost.Seq, Input: in, BodyHash: InputHash(in)}, time.Hour); err != nil {
			t.Fatal(err)
		}
		a.Close()
		st.advance(t, cfgA.LeaseTTL+time.Second)

		cfgB, recB, _ := testConfig(st, "b/1", tr)
		b := startManager(t, cfgB)
		if n, err := b.Recover(ctx, 10); err != nil || n != 1 {
			t.Fatalf("recover = %d, %v; want 1", n, err)
		}
		waitFor(t, tr, trace.Kind("session.emit", "owner", "b/1", "type", agent.TypeTurnCompleted), 1)
		evs := logEvents(t, st.log, "s1")
		assertContiguous(t, evs)
		relogged := evs[len(top)]
		if relogged.Pos() != lost || relogged.Type != agent.TypeUserEvent {
			t.Fatalf("event after a/1's last = %v %s, want the user_event at %v; log: %v", relogged.Pos(), relogged.Type, lost, positions(evs))
		}
		var d struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(relogged.Data, &d); err != nil || d.Type != "message" || string(d.Data) != string(in.Data) {
			t.Fatalf("relogged user_event data = %s, want the accepted input", relogged.Data)
		}
		first := firstOfEpoch(evs, 2)
		if first.Type != agent.TypeTurnStarted || first.Prev == nil || *first.Prev != lost {
			t.Fatalf("epoch 2's first event = %s prev %v, want turn_started with prev %v", first.Type, first.Prev, lost)
		}
		if pub := recB.all(); len(pub) == 0 || pub[0].Pos() != lost {
			t.Fatalf("b published %v first, want the relogged user_event (observers see it live)", positions(pub))
		}
		if s := b.Stats(); s.Relogged != 1 {
			t.Fatalf("b stats = %+v, want 1 relogged event", s)
		}
		// A retry of the lost input's key is the same event.
		acc, err := b.Accept(ctx, "s1", in)
		if err != nil || !acc.Duplicate || acc.Pos() != lost {
			t.Fatalf("retry of the accepted key = %+v, %v; want a duplicate at %v", acc, err, lost)
		}
	})
}

// The end of a turn whose completion the store holds but whose owner
// stopped before logging it (parked right after the completion write) is
// logged by the next owner at the seqs the completion took: the stored
// reply as message, then turn_completed. The log has no hole, a client at
// the old owner's last event sees the end live, and the old owner, when it
// wakes, is fenced.
func TestThawRelogsTurnEnd(t *testing.T) {
	forEachStores(t, func(t *testing.T, newStores func(t *testing.T) *stores) {
		st := newStores(t)
		tr := trace.New()
		cfgA, recA, _ := testConfig(st, "a/1", tr)
		a := NewManager(cfgA)
		defer a.Close()
		at := trace.Kind("session.checkpoint.ok", "owner", "a/1")
		tr.Park(at, trace.Kind("session.emit", "owner", "b/1", "type", agent.TypeTurnCompleted))
		submit(t, a, "s1", "one two three")
		waitFor(t, tr, at, 1)
		st.advance(t, cfgA.LeaseTTL+time.Second)

		cfgB, recB, _ := testConfig(st, "b/1", tr)
		b := startManager(t, cfgB)
		acc := submit(t, b, "s1", "four")
		waitFor(t, tr, trace.Kind("session.emit", "owner", "b/1", "type", agent.TypeTurnCompleted), 1)
		evs := logEvents(t, st.log, "s1")
		assertContiguous(t, evs)
		want := []string{agent.TypeUserEvent, agent.TypeTurnStarted, agent.TypeDelta, agent.TypeDelta, agent.TypeDelta, agent.TypeMessage, agent.TypeTurnCompleted,
			agent.TypeUserEvent, agent.TypeTurnStarted, agent.TypeDelta, agent.TypeMessage, agent.TypeTurnCompleted}
		if got := types(evs); !reflect.DeepEqual(got, want) {
			t.Fatalf("log = %v, want %v", positions(evs), want)
		}
		var m agent.Message
		if err := json.Unmarshal(evs[5].Data, &m); err != nil || evs[5].Epoch != 1 || m != (agent.Message{Role: "assistant", Content: "one two three"}) {
			t.Fatalf("relogged message = %v %s, want the stored reply at epoch 1", evs[5].Pos(), evs[5].Data)
		}
		if acc.Epoch != 2 || evs[7].Prev == nil || *evs[7].Prev != evs[6].Pos() {
			t.Fatalf("b accepted at %v, its user_event prev %v; want epoch 2 with prev %v", acc.Pos(), evs[7].Prev, evs[6].Pos())
		}
		if got := types(recA.all()); len(got) != 5 {
			t.Fatalf("a published %v before it parked, want the 5 events up to the last delta", got)
		}
		if got := types(recB.all())[:2]; !reflect.DeepEqual(got, []string{agent.TypeMessage, agent.TypeTurnCompleted}) {
			t.Fatalf("b published first %v, want the relogged message and turn_completed", got)
		}
		waitFor(t, tr, trace.Kind("session.fenced", "owner", "a/1"), 1)
		assertNoParkFailures(t, tr)
		assertContiguous(t, logEvents(t, st.log, "s1")) // a added nothing
	})
}

// A new owner continues seq from the log's top when the log holds events
// past the stored seq (the deltas of a turn cut short): the first event of
// the new epoch has the next seq, so a client that missed the dead
// epoch's last delta sees a seq jump and rejoins.
func TestThawContinuesSeqFromLogTop(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfgA, _, _ := testConfig(st, "a/1", tr)
	cfgA.Agent = EchoAgent{}
	a := NewManager(cfgA)
	defer a.Close()
	// user_event 1, turn_started 2, deltas 3 and 4 logged; parked at 4.
	at := trace.Kind("session.emit", "owner", "a/1", "type", agent.TypeDelta, "seq", int64(4))
	tr.Park(at, trace.Kind("session.emit", "owner", "b/1", "type", agent.TypeTurnCompleted))
	submit(t, a, "s1", "w1 w2 w3 w4")
	waitFor(t, tr, at, 1)
	st.advance(t, cfgA.LeaseTTL+time.Second)

	cfgB, recB, _ := testConfig(st, "b/1", tr)
	cfgB.Agent = StorableOutput(newBlockAgent()) // cannot resume: restarts
	b := startManager(t, cfgB)
	if n, err := b.Recover(context.Background(), 10); err != nil || n != 1 {
		t.Fatalf("recover = %d, %v", n, err)
	}
	waitFor(t, tr, trace.Kind("session.turn.start", "owner", "b/1"), 1)
	first := recB.all()[0]
	if first.Pos() != (agent.Position{Epoch: 2, Seq: 5}) || first.Prev == nil || *first.Prev != (agent.Position{Epoch: 1, Seq: 4}) {
		t.Fatalf("b's first event = %v %s prev %v, want 2-5 with prev 1-4", first.Pos(), first.Type, first.Prev)
	}
}
