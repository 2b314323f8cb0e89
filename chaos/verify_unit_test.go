package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/testkit/proctest"
)

// fakeRun builds the data of a clean run on one session "s": keys k1 and k2
// accepted at epoch 1 and run to completion, the log holding both turns, one
// observer holding exactly the log.
func fakeRun() runData {
	var log []agent.Event
	add := func(epoch int64, typ string, data any) {
		b, _ := json.Marshal(data)
		seq := int64(1)
		if n := len(log); n > 0 {
			seq = log[n-1].Seq + 1
		}
		log = append(log, agent.Event{Session: "s", Epoch: epoch, Seq: seq, Type: typ, Data: b})
	}
	var deliveries []*delivery
	var history []proctest.HistoryMessage
	for _, key := range []string{"k1", "k2"} {
		text := eventText(key)
		add(1, agent.TypeUserEvent, map[string]any{"type": "message", "data": map[string]string{"text": text}})
		turn := log[len(log)-1]
		deliveries = append(deliveries, &delivery{Session: "s", Key: key, Text: text,
			Answers:  []answer{{Kind: answerAccepted, Node: "a", Status: http.StatusAccepted}},
			Accepted: &proctest.Accepted{Session: "s", Epoch: turn.Epoch, Seq: turn.Seq}})
		add(1, agent.TypeTurnStarted, map[string]any{})
		add(1, agent.TypeDelta, map[string]string{"text": key + " "})
		add(1, agent.TypeMessage, proctest.Message{Role: "assistant", Content: text})
		add(1, agent.TypeTurnCompleted, map[string]any{})
		for _, role := range []string{"user", "assistant"} {
			m := proctest.HistoryMessage{N: int64(len(history) + 1), Message: proctest.Message{Role: role, Content: text}}
			m.Turn.Epoch, m.Turn.Seq = turn.Epoch, turn.Seq
			history = append(history, m)
		}
	}
	d := runData{
		Deliveries: deliveries,
		Histories:  map[string][]proctest.HistoryMessage{"s": history},
		Logs:       map[string][]agent.Event{"s": log},
	}
	d.Observers = []observed{{Node: "a", Session: "s", Record: asPushes(log), Seen: asPushes(log)}}
	return d
}

func asPushes(log []agent.Event) []phxtest.SessionEvent {
	out := make([]phxtest.SessionEvent, len(log))
	for i, ev := range log {
		out[i] = phxtest.SessionEvent{Session: ev.Session, Epoch: ev.Epoch, Seq: ev.Seq, Type: ev.Type, Data: ev.Data}
	}
	return out
}

// refused is a delivery of key given up after refusals only.
func refused(key string, answers ...answer) *delivery {
	if len(answers) == 0 {
		answers = []answer{{Kind: answerRefused, Node: "b", Status: http.StatusServiceUnavailable, Code: "session_moving",
			Retry: &proctest.Retry{AfterMS: 100, BudgetMS: 100}}}
	}
	return &delivery{Session: "s", Key: key, Text: eventText(key), Answers: answers}
}

// TestCheckFindsEachViolation: the checker passes a clean run and finds
// each kind of violation it exists for, counted once under its property,
// on hand-made run data.
func TestCheckFindsEachViolation(t *testing.T) {
	clean := tally{Accepted: 2}
	tests := []struct {
		name   string
		mutate func(d *runData)
		want   tally
		prop   string
	}{
		{"clean", func(*runData) {}, clean, ""},
		{"lost", func(d *runData) { d.Histories["s"] = d.Histories["s"][:2] },
			tally{Accepted: 2, Lost: 1}, propAccepted},
		{"duplicated", func(d *runData) { d.Histories["s"] = append(d.Histories["s"], d.Histories["s"][:2]...) },
			tally{Accepted: 2, Duplicated: 1}, propAccepted},
		{"logged twice", func(d *runData) {
			ev := d.Logs["s"][0]
			ev.Epoch, ev.Seq = 2, 11
			d.Logs["s"] = append(d.Logs["s"], ev)
			d.Observers[0].Record = asPushes(d.Logs["s"])
		}, tally{Accepted: 2, LoggedTwice: 1}, propAccepted},
		{"not logged", func(d *runData) {
			// k2's position holds another event: the log lacks k2, and its
			// 202 named a position another write took.
			d.Logs["s"][5] = agent.Event{Session: "s", Epoch: 1, Seq: 6, Type: agent.TypeDelta, Data: json.RawMessage(`{"text":"x "}`)}
			d.Observers[0].Record, d.Observers[0].Seen = asPushes(d.Logs["s"]), asPushes(d.Logs["s"])
		}, tally{Accepted: 2, Unlogged: 1, SplitBrain: 1}, propAccepted},
		{"turn never ended", func(d *runData) { d.Histories["s"] = d.Histories["s"][:3] },
			tally{Accepted: 2, Incomplete: 1}, propAccepted},
		{"turn failed with a reason", func(d *runData) {
			d.Histories["s"] = d.Histories["s"][:3]
			log := d.Logs["s"][:8]
			log = append(log, agent.Event{Session: "s", Epoch: 1, Seq: 9, Type: agent.TypeTurnFailed, Data: json.RawMessage(`{"error":"context canceled"}`)})
			d.Logs["s"] = log
			d.Observers[0].Record, d.Observers[0].Seen = asPushes(log), asPushes(log)
		}, tally{Accepted: 2, FailedTurns: 1}, ""},
		{"refused, then run", func(d *runData) {
			d.Deliveries[1].Accepted = nil
			d.Deliveries[1].Answers = refused("k2").Answers
		}, tally{Accepted: 1, Refused: 1, Refusals: 1, RefusedRan: 1}, propRefusal},
		{"refused, then answered duplicate", func(d *runData) {
			dl := d.Deliveries[1]
			dl.Accepted.Duplicate = true
			dl.Answers = append(refused("k2").Answers, dl.Answers...)
		}, tally{Accepted: 2, Duplicates: 1, Refusals: 1, RefusedRan: 1}, propRefusal},
		{"refused yet logged, then accepted anew", func(d *runData) {
			dl := d.Deliveries[1]
			dl.Answers = append(refused("k2").Answers, dl.Answers...)
			ev := d.Logs["s"][5] // k2's user_event, logged by the refused attempt at 1-6
			ev.Epoch, ev.Seq = 2, 11
			d.Logs["s"] = append(d.Logs["s"], ev)
			dl.Accepted.Epoch, dl.Accepted.Seq = 2, 11
			d.Observers[0].Record = asPushes(d.Logs["s"])
		}, tally{Accepted: 2, Refusals: 1, LoggedTwice: 1, RefusedRan: 1}, propRefusal},
		{"unknown, then answered duplicate", func(d *runData) {
			dl := d.Deliveries[1]
			dl.Accepted.Duplicate = true
			dl.Answers = append([]answer{{Kind: answerUnknown, Node: "b", Status: http.StatusGatewayTimeout, Code: "forward_timeout"}}, dl.Answers...)
		}, tally{Accepted: 2, Duplicates: 1, Open: 1}, ""},
		{"refused and nowhere", func(d *runData) { d.Deliveries = append(d.Deliveries, refused("k3")) },
			tally{Accepted: 2, Refused: 1, Refusals: 1}, ""},
		{"two events at one position", func(d *runData) {
			ev := d.Observers[0].Seen[2]
			ev.Data = json.RawMessage(`{"text":"other "}`)
			d.Observers = append(d.Observers, observed{Node: "b", Session: "s", Record: d.Observers[0].Record, Seen: []phxtest.SessionEvent{ev}})
		}, tally{Accepted: 2, SplitBrain: 1}, propSingle},
		{"two keys accepted at one position", func(d *runData) {
			dl := *d.Deliveries[0]
			dl.Key, dl.Text = "k9", eventText("k9")
			d.Deliveries = append(d.Deliveries, &dl)
		}, tally{Accepted: 3, Lost: 1, Unlogged: 1, SplitBrain: 1}, propSingle},
		{"a gap inside an epoch", func(d *runData) {
			rec := d.Observers[0].Record
			d.Observers[0].Record = append(rec[:3:3], rec[4:]...)
		}, tally{Accepted: 2, Gaps: 1}, propGapless},
		{"a dead epoch's tail never seen", func(d *runData) {
			// The owner of epoch 1 emitted 1-6..1-10 after its last
			// checkpoint (seq 5); epoch 2 goes on from 2-6. The observer
			// missed the tail and no seq jump told it.
			log := d.Logs["s"]
			for _, ev := range log[5:] {
				ev.Epoch = 2
				log = append(log, ev)
			}
			d.Logs["s"] = log
			d.Observers[0].Record = append(asPushes(log[:5]), asPushes(log[10:])...)
			d.Observers[0].Seen = d.Observers[0].Record
		}, tally{Accepted: 2, Gaps: 1, LoggedTwice: 1}, propGapless},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := fakeRun()
			tc.mutate(&d)
			r := check(7, d)
			if got := r.tally; got != tc.want {
				t.Errorf("counts\n got %v\nwant %v\nviolations %v", got, tc.want, r.Violations)
			}
			if tc.prop != "" && len(r.Violations[tc.prop]) == 0 {
				t.Errorf("no violation of %s: %v", tc.prop, r.Violations)
			}
			if tc.prop == "" && len(r.Violations) != 0 {
				t.Errorf("violations of a run that holds: %v", r.Violations)
			}
		})
	}
}

// TestRecordGap: the observers' contiguity rule (README "Gaps"): within an
// epoch seq steps by one; a new epoch may step back or continue, never jump.
func TestRecordGap(t *testing.T) {
	ev := func(epoch, seq int64) phxtest.SessionEvent { return phxtest.SessionEvent{Epoch: epoch, Seq: seq} }
	for _, tc := range []struct {
		rec  []phxtest.SessionEvent
		want bool // a gap
	}{
		{nil, false},
		{[]phxtest.SessionEvent{ev(1, 1), ev(1, 2), ev(2, 3)}, false},
		{[]phxtest.SessionEvent{ev(1, 1), ev(1, 2), ev(1, 3), ev(2, 2)}, false},
		{[]phxtest.SessionEvent{ev(1, 2)}, true},
		{[]phxtest.SessionEvent{ev(1, 1), ev(1, 3)}, true},
		{[]phxtest.SessionEvent{ev(1, 1), ev(2, 3)}, true},
		{[]phxtest.SessionEvent{ev(1, 1), ev(1, 2), ev(1, 2)}, true},
		{[]phxtest.SessionEvent{ev(2, 1), ev(1, 2)}, true},
	} {
		if got := recordGap(tc.rec) != ""; got != tc.want {
			t.Errorf("recordGap(%v) = %q, want a gap: %v", tc.rec, recordGap(tc.rec), tc.want)
		}
	}
}

// TestScheduleIsSeeded: one seed gives one schedule; pauses outlast the
// lease TTL; every fault names a node of the cluster.
func TestScheduleIsSeeded(t *testing.T) {
	const ttl = 2e9
	for seed := range uint64(50) {
		a, b := newSchedule(seed, 8, 3, ttl), newSchedule(seed, 8, 3, ttl)
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("seed %d: two schedules %v and %v", seed, a, b)
		}
		for _, f := range a.Faults {
			if f.Node < 0 || f.Node >= 3 || f.Kind == faultPause && f.Hold <= ttl {
				t.Errorf("seed %d: fault %v", seed, f)
			}
		}
	}
	if fmt.Sprint(newSchedule(1, 8, 3, ttl)) == fmt.Sprint(newSchedule(2, 8, 3, ttl)) {
		t.Error("seeds 1 and 2 give the same schedule")
	}
}

// TestCheckerSeedsCoverEveryFault: the few seeds make test runs apply,
// between them, every fault kind of the schedule.
func TestCheckerSeedsCoverEveryFault(t *testing.T) {
	cfg := defaultCheckerConfig
	ttl, err := time.ParseDuration(cfg.Env["LEASE_TTL"])
	if err != nil {
		t.Fatal(err)
	}
	seen := map[faultKind]bool{}
	for _, seed := range checkerSeeds {
		for _, f := range newSchedule(seed, cfg.Faults, cfg.Nodes, ttl).Faults {
			seen[f.Kind] = true
		}
	}
	for _, k := range faultKinds {
		if !seen[k] {
			t.Errorf("no schedule of seeds %v applies %s", checkerSeeds, k)
		}
	}
}

// TestObserverKeepsContiguousEvents: the observer's rule on one join's
// pushes. It keeps contiguous events (a new epoch may step back when its
// prev is held), ignores
// a push at or before what it holds, and reports a jump without keeping
// the event, unless its join said the replay could not fill the gap: then
// it keeps the event and notes the hole.
func TestObserverKeepsContiguousEvents(t *testing.T) {
	ev := func(epoch, seq int64) phxtest.SessionEvent {
		return phxtest.SessionEvent{Epoch: epoch, Seq: seq, Type: agent.TypeDelta}
	}
	evp := func(epoch, seq, prevEpoch, prevSeq int64) phxtest.SessionEvent {
		e := ev(epoch, seq)
		e.Prev = &agent.Position{Epoch: prevEpoch, Seq: prevSeq}
		return e
	}
	o := &observer{}
	steps := []struct {
		ev   phxtest.SessionEvent
		jump bool
	}{
		{ev(1, 2), true}, // nothing held: the first event must be seq 1
		{ev(1, 1), false},
		{ev(1, 2), false},
		{ev(1, 2), false}, // stale
		{ev(1, 4), true},
		{ev(1, 3), false},
		{evp(2, 2, 1, 3), false}, // a new epoch steps back, its prev is held
		{ev(2, 3), false},
		{evp(3, 5, 2, 4), true}, // the old epoch's tail (2-4) was missed
		{ev(3, 6), true},        // the new epoch's first event (with prev) was missed
	}
	for i, s := range steps {
		if got := o.add(s.ev); got != s.jump {
			t.Fatalf("step %d (%v): jump %v, want %v", i, pos(s.ev), got, s.jump)
		}
	}
	if got := o.top(); got != (agent.Position{Epoch: 2, Seq: 3}) || len(o.record) != 5 || o.stale != 1 || o.jumps != 4 {
		t.Fatalf("top %v, %d held, %d stale, %d jumps", got, len(o.record), o.stale, o.jumps)
	}
	o.unrecovered, o.acceptJump = []string{"join at 2-3: replay_truncated"}, true
	if o.add(ev(3, 6)) || o.top() != (agent.Position{Epoch: 3, Seq: 6}) || len(o.holes) != 1 {
		t.Fatalf("after an unrecovered join: top %v, holes %v", o.top(), o.holes)
	}
	if !o.add(ev(3, 8)) {
		t.Fatal("a later jump is not kept")
	}
}
