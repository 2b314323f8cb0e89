package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestSubmitRunsTurnsInSeqOrder(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, rec, _ := testConfig(st, "a/1", tr)
	m := startManager(t, cfg)

	acc := submit(t, m, "s1", "hello world")
	if acc != (Accepted{Session: "s1", Epoch: 1, Seq: 1}) {
		t.Fatalf("first accept = %+v, want s1 1-1", acc)
	}
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 1)
	acc = submit(t, m, "s1", "again")
	if acc.Epoch != 1 || acc.Seq != 7 {
		t.Fatalf("second accept = %+v, want 1-7 (after six events of the first turn)", acc)
	}
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 2)

	want := []string{
		agent.TypeUserEvent, agent.TypeTurnStarted, agent.TypeDelta, agent.TypeDelta, agent.TypeMessage, agent.TypeTurnCompleted,
		agent.TypeUserEvent, agent.TypeTurnStarted, agent.TypeDelta, agent.TypeMessage, agent.TypeTurnCompleted,
	}
	logged := logEvents(t, st.log, "s1")
	if got := types(logged); !reflect.DeepEqual(got, want) {
		t.Fatalf("log types = %v, want %v", got, want)
	}
	assertIncreasing(t, logged)
	for i, ev := range logged {
		if ev.Seq != int64(i+1) || ev.Epoch != 1 || ev.Session != "s1" || ev.At.IsZero() {
			t.Fatalf("event %d = %+v, want s1 1-%d with a time", i, ev, i+1)
		}
	}
	published := rec.all()
	if len(published) != len(logged) {
		t.Fatalf("published %d events, logged %d", len(published), len(logged))
	}
	for i := range published {
		if published[i].Pos() != logged[i].Pos() || published[i].Type != logged[i].Type {
			t.Fatalf("published %d = %v %s, logged %v %s", i, published[i].Pos(), published[i].Type, logged[i].Pos(), logged[i].Type)
		}
	}

	wantData := map[int]string{
		0: `{"type":"message","data":{"text":"hello world"}}`,
		1: `{"turn":{"epoch":1,"seq":1},"attempt":1}`,
		2: `{"text":"hello "}`,
		3: `{"text":"world "}`,
		4: `{"role":"assistant","content":"hello world"}`,
		5: `{}`,
	}
	for i, w := range wantData {
		assertJSON(t, logged[i].Data, w)
	}

	stt := state(t, m, "s1")
	wantHist := []agent.Message{{Role: "user", Content: "hello world"}, {Role: "assistant", Content: "hello world"}, {Role: "user", Content: "again"}, {Role: "assistant", Content: "again"}}
	if stt.Source != SourceActor || stt.Epoch != 1 || stt.Seq != 11 || !reflect.DeepEqual(messages(stt.History), wantHist) || stt.Running || stt.Total != 4 {
		t.Fatalf("state = %+v, want live actor at 1-11 with %v", stt, wantHist)
	}
	if s := m.Stats(); s.Accepted != 2 || s.TurnsCompleted != 2 || s.Thaws != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

func assertJSON(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("data %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("data = %s, want %s", got, want)
	}
}

func TestInputsAcceptedDuringTurnRunAfterIt(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, _, _ := testConfig(st, "a/1", tr)
	ag := newBlockAgent()
	cfg.Agent = ag
	m := startManager(t, cfg)

	a1 := submit(t, m, "s1", "one")
	<-ag.started
	a2 := submit(t, m, "s1", "two")
	a3 := submit(t, m, "s1", "three")
	if a1.Seq != 1 || a2.Seq != 3 || a3.Seq != 4 {
		t.Fatalf("accepted at %d, %d, %d; want 1, 3, 4 (turn_started is 2)", a1.Seq, a2.Seq, a3.Seq)
	}
	if n := tr.Count(trace.Kind("session.turn.start")); n != 1 {
		t.Fatalf("%d turns started while the first runs, want 1", n)
	}
	if info := m.Sessions(); len(info) != 1 || !info[0].Running || info[0].Pending != 2 {
		t.Fatalf("sessions = %+v, want one running with 2 pending", info)
	}
	close(ag.release)
	second := <-ag.started
	third := <-ag.started
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 3)

	wantSecond := []agent.Message{{Role: "user", Content: "one"}, {Role: "assistant", Content: "done"}}
	if !reflect.DeepEqual(second.History, wantSecond) || agent.InputText(second.Input) != "two" {
		t.Fatalf("second turn saw %v / %q, want %v / two", second.History, agent.InputText(second.Input), wantSecond)
	}
	if len(third.History) != 4 {
		t.Fatalf("third turn saw history %v, want 4 messages", third.History)
	}
	logged := logEvents(t, st.log, "s1")
	assertIncreasing(t, logged)
	want := []string{
		agent.TypeUserEvent, agent.TypeTurnStarted, agent.TypeUserEvent, agent.TypeUserEvent, agent.TypeMessage, agent.TypeTurnCompleted,
		agent.TypeTurnStarted, agent.TypeMessage, agent.TypeTurnCompleted, agent.TypeTurnStarted, agent.TypeMessage, agent.TypeTurnCompleted,
	}
	if got := types(logged); !reflect.DeepEqual(got, want) {
		t.Fatalf("log types = %v, want %v", got, want)
	}
}

func TestCheckpointWrittenBeforeMessagePublished(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, rec, _ := testConfig(st, "a/1", tr)
	m := startManager(t, cfg)

	// When the message goes out, the checkpoint must already hold it.
	type seen struct {
		history []agent.Message
		seq     int64
	}
	atMessage := make(chan seen, 1)
	rec.setHook(func(ev agent.Event) {
		if ev.Type != agent.TypeMessage {
			return
		}
		s := loadStored(t, st.store, "s1")
		atMessage <- seen{messages(s.History), s.Seq}
	})
	tr.Park(trace.Kind("session.checkpoint.before"), trace.Kind("test.release"))

	submit(t, m, "s1", "hi there")
	waitFor(t, tr, trace.Kind("session.checkpoint.before"), 1)
	// The actor is parked just before its checkpoint: the deltas are out,
	// the message is not, and the stored checkpoint lacks the answer.
	if got := types(rec.all()); !reflect.DeepEqual(got, []string{agent.TypeUserEvent, agent.TypeTurnStarted, agent.TypeDelta, agent.TypeDelta}) {
		t.Fatalf("published before the checkpoint: %v", got)
	}
	if s := loadStored(t, st.store, "s1"); len(s.History) != 0 || len(s.Inbox) != 1 {
		t.Fatalf("store already holds %v (inbox %v), want no history and the input in the inbox", s.History, s.Inbox)
	}
	tr.Emit("test.release")
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 1)
	assertNoParkFailures(t, tr)

	got := <-atMessage
	want := []agent.Message{{Role: "user", Content: "hi there"}, {Role: "assistant", Content: "hi there"}}
	if !reflect.DeepEqual(got.history, want) {
		t.Fatalf("checkpoint at message time = %v, want %v", got.history, want)
	}
	msg := rec.ofType(agent.TypeMessage)[0]
	done := rec.ofType(agent.TypeTurnCompleted)[0]
	if got.seq != done.Seq || msg.Seq != done.Seq-1 {
		t.Fatalf("checkpoint seq %d, message %d, turn_completed %d: the checkpoint must cover both", got.seq, msg.Seq, done.Seq)
	}
	ok := waitFor(t, tr, trace.Kind("session.checkpoint.ok"), 1)
	pub := waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeMessage), 1)
	if ok.Seq > pub.Seq {
		t.Fatalf("message published (trace %d) before the checkpoint landed (trace %d)", pub.Seq, ok.Seq)
	}
}

func TestIdempotencyKeys(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, _, _ := testConfig(st, "a/1", tr)
	ag := newBlockAgent()
	cfg.Agent = ag
	cfg.MaxIdempotencyKeys = 2
	m := startManager(t, cfg)
	ctx := context.Background()

	first, err := m.Accept(ctx, "s1", textInput("one", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	<-ag.started
	// Seen while the first turn still runs.
	dup, err := m.Accept(ctx, "s1", textInput("one", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Accepted{Session: "s1", Epoch: first.Epoch, Seq: first.Seq, Duplicate: true}); dup != want {
		t.Fatalf("duplicate = %+v, want %+v", dup, want)
	}
	close(ag.release)
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 1)
	th, err := st.store.Thaw(ctx, "s1", first.Epoch, ThawQuery{KeyTTL: time.Hour, MaxKeys: 10})
	if err != nil || len(th.Keys) != 1 || th.Keys[0].Key != "k1" || th.Keys[0].Epoch != first.Epoch || th.Keys[0].Seq != first.Seq ||
		th.Keys[0].BodyHash != InputHash(textInput("one", "")) {
		t.Fatalf("stored keys = %+v (%v), want k1 at %d-%d with the body's hash", th.Keys, err, first.Epoch, first.Seq)
	}
	// Seen after the turn, from memory again; whitespace in data is not
	// part of the body.
	if dup, err = m.Accept(ctx, "s1", agent.Input{Type: "message", Data: json.RawMessage(`{ "text" : "one" }`), IdempotencyKey: "k1"}); err != nil || !dup.Duplicate || dup.Seq != first.Seq {
		t.Fatalf("late duplicate = %+v, %v", dup, err)
	}
	// The same key with another body is refused, and nothing is logged.
	if _, err := m.Accept(ctx, "s1", textInput("something else", "k1")); !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Fatalf("key reused with another body = %v, want ErrIdempotencyKeyReused", err)
	}
	if n := len(logEventsOfType(t, st.log, "s1", agent.TypeUserEvent)); n != 1 {
		t.Fatalf("%d user events for one key, want 1", n)
	}

	// The in-memory set is bounded: after two newer keys k1 is no longer
	// in memory, but still remembered, from the store, for its retention.
	for _, k := range []string{"k2", "k3"} {
		if acc, err := m.Accept(ctx, "s1", textInput(k, k)); err != nil || acc.Duplicate {
			t.Fatalf("submit %s = %+v, %v", k, acc, err)
		}
	}
	again, err := m.Accept(ctx, "s1", textInput("one", "k1"))
	if err != nil || !again.Duplicate || again.Pos() != first.Pos() {
		t.Fatalf("k1 after it left memory = %+v, %v; want the duplicate of %v", again, err, first.Pos())
	}
	if _, err := m.Accept(ctx, "s1", textInput("something else", "k1")); !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Fatalf("k1 after it left memory, another body = %v, want ErrIdempotencyKeyReused", err)
	}
	if n := tr.Count(trace.Kind("session.key.lookup", "found", true)); n != 2 {
		t.Fatalf("%d store lookups found k1, want 2 (it had left memory)", n)
	}
	if s := m.Stats(); s.Duplicates != 3 || s.Accepted != 3 {
		t.Fatalf("stats = %+v, want 3 duplicates and 3 accepted", s)
	}
}

func logEventsOfType(t *testing.T, l ReplayLog, id, typ string) []agent.Event {
	var out []agent.Event
	for _, ev := range logEvents(t, l, id) {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func TestSubmitBusyWhenMailboxFull(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, _, _ := testConfig(st, "a/1", tr)
	cfg.MailboxSize = 1
	m := startManager(t, cfg)

	// Hold the actor inside its first acceptance so the mailbox fills.
	tr.Park(trace.Kind("session.accepted"), trace.Kind("test.release"))
	var wg sync.WaitGroup
	results := make([]error, 2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, results[0] = m.Accept(context.Background(), "s1", textInput("one", ""))
	}()
	waitFor(t, tr, trace.Kind("session.accepted"), 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, results[1] = m.Accept(context.Background(), "s1", textInput("two", ""))
	}()
	waitFor(t, tr, trace.Kind("session.submit.queued"), 2)

	if _, err := m.Accept(context.Background(), "s1", textInput("three", "")); !errors.Is(err, ErrBusy) {
		t.Fatalf("third submit = %v, want ErrBusy", err)
	}
	tr.Emit("test.release")
	wg.Wait()
	assertNoParkFailures(t, tr)
	if results[0] != nil || results[1] != nil {
		t.Fatalf("parked submits = %v", results)
	}
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 2)
	if n := len(logEventsOfType(t, st.log, "s1", agent.TypeUserEvent)); n != 2 {
		t.Fatalf("%d inputs accepted, want 2", n)
	}
}

func TestConcurrentSubmitsToOneSession(t *testing.T) {
	const writers, each = 16, 10
	st := memoryStores()
	tr := trace.New()
	cfg, _, _ := testConfig(st, "a/1", tr)
	cfg.MailboxSize = writers * each
	cfg.MaxPending = writers * each
	m := startManager(t, cfg)

	var mu sync.Mutex
	accepted := map[int64]string{}
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				text := fmt.Sprintf("w%d-%d", w, i)
				acc, err := m.Accept(context.Background(), "s1", textInput(text, text))
				if err != nil {
					errs <- err
					continue
				}
				mu.Lock()
				if prev, dup := accepted[acc.Seq]; dup {
					errs <- fmt.Errorf("seq %d given to %s and %s", acc.Seq, prev, text)
				}
				accepted[acc.Seq] = text
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), writers*each)

	logged := logEvents(t, st.log, "s1")
	assertIncreasing(t, logged)
	users := 0
	for _, ev := range logged {
		if ev.Type != agent.TypeUserEvent {
			continue
		}
		users++
		var d struct{ Data struct{ Text string } }
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		if accepted[ev.Seq] != d.Data.Text {
			t.Fatalf("user_event at %d is %q, Submit reported %q there", ev.Seq, d.Data.Text, accepted[ev.Seq])
		}
	}
	if users != writers*each {
		t.Fatalf("%d user events, want %d", users, writers*each)
	}
	stt := state(t, m, "s1")
	if stt.Total != 2*writers*each {
		t.Fatalf("history has %d messages, want %d", len(stt.History), 2*writers*each)
	}
	// Each writer's inputs were accepted in the order it submitted them.
	last := map[int]int64{}
	for seq := int64(1); seq <= logged[len(logged)-1].Seq; seq++ {
		text, ok := accepted[seq]
		if !ok {
			continue
		}
		var w, i int
		if _, err := fmt.Sscanf(text, "w%d-%d", &w, &i); err != nil {
			t.Fatal(err)
		}
		if prev, seen := last[w]; seen && prev != int64(i-1) {
			t.Fatalf("writer %d: input %d accepted after input %d", w, i, prev)
		}
		last[w] = int64(i)
	}
}

func TestSubmitRefusals(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfgA, _, _ := testConfig(st, "a/1", tr)
	a := startManager(t, cfgA)
	flaky := &flakyLeases{LeaseStore: st.leases}
	cfgB, recB, _ := testConfig(st, "b/1", tr)
	cfgB.Leases = flaky
	b := startManager(t, cfgB)
	ctx := context.Background()

	if _, err := a.Accept(ctx, "bad id!", textInput("x", "")); !errors.Is(err, ErrInvalidID) {
		t.Fatalf("bad id: %v", err)
	}
	submit(t, a, "s1", "mine")
	_, err := b.Accept(ctx, "s1", textInput("yours?", ""))
	var held *LeaseHeldError
	if !errors.As(err, &held) || held.Holder != "a/1" || held.Epoch != 1 || held.Remaining <= 0 {
		t.Fatalf("submit to a held session = %v, want *LeaseHeldError by a/1", err)
	}
	flaky.failing.Store(true)
	if _, err := b.Accept(ctx, "s2", textInput("x", "")); !errors.Is(err, errStoreDown) {
		t.Fatalf("submit with the lease store down = %v, want the store's error", err)
	}
	if len(b.Sessions()) != 0 || len(recB.all()) != 0 {
		t.Fatalf("refused submits left actors %v or events %v", b.Sessions(), recB.all())
	}
	if len(logEvents(t, st.log, "s2")) != 0 {
		t.Fatal("refused submit reached the log")
	}
}

type failAgent struct{ panics bool }

func (f failAgent) Run(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error) {
	if err := emit(ctx, "", deltaData{Text: "partial"}); err != nil {
		return agent.Message{}, err
	}
	if f.panics {
		panic("agent bug")
	}
	return agent.Message{}, errors.New("model unavailable")
}

func TestAgentErrorEndsTurnFailedAndCheckpointed(t *testing.T) {
	for _, panics := range []bool{false, true} {
		t.Run(fmt.Sprintf("panic=%v", panics), func(t *testing.T) {
			st := memoryStores()
			tr := trace.New()
			cfg, rec, _ := testConfig(st, "a/1", tr)
			cfg.Agent = failAgent{panics: panics}
			core, logs := observer.New(zap.WarnLevel)
			cfg.Logger = zap.New(core)
			m := startManager(t, cfg)

			submit(t, m, "s1", "question")
			waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnFailed), 1)
			if got := types(rec.all()); !reflect.DeepEqual(got, []string{agent.TypeUserEvent, agent.TypeTurnStarted, agent.TypeDelta, agent.TypeTurnFailed}) {
				t.Fatalf("published %v", got)
			}
			var d struct{ Error string }
			if err := json.Unmarshal(rec.ofType(agent.TypeTurnFailed)[0].Data, &d); err != nil || d.Error == "" {
				t.Fatalf("turn_failed data %s", rec.ofType(agent.TypeTurnFailed)[0].Data)
			}
			s := loadStored(t, st.store, "s1")
			if !reflect.DeepEqual(messages(s.History), []agent.Message{{Role: "user", Content: "question"}}) || s.Seq != 4 || len(s.Inbox) != 0 {
				t.Fatalf("stored = %+v, want the user message at seq 4 and an empty inbox", s)
			}
			if m.Stats().TurnsFailed != 1 {
				t.Fatalf("stats %+v", m.Stats())
			}
			// The turn is logged as failed once, with the agent's error.
			if l := logs.FilterMessage("turn failed").FilterField(zap.String("session", "s1")).All(); len(l) != 1 || l[0].ContextMap()["error"] == "" {
				t.Fatalf("turn failed log lines %+v, want one naming the error", l)
			}
		})
	}
}

func TestAgentCannotEmitReservedTypes(t *testing.T) {
	st := memoryStores()
	cfg, _, _ := testConfig(st, "a/1", nil)
	got := make(chan error, 1)
	cfg.Agent = agentFunc(func(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error) {
		got <- emit(ctx, agent.TypeMessage, map[string]string{"role": "assistant"})
		return agent.Message{Content: "ok"}, nil
	})
	m := startManager(t, cfg)
	submit(t, m, "s1", "x")
	if err := <-got; err == nil {
		t.Fatal("agent emitted a reserved message event")
	}
}

type agentFunc func(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error)

func (f agentFunc) Run(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error) {
	return f(ctx, turn, emit)
}

func TestStateSources(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfgA, _, _ := testConfig(st, "a/1", tr)
	a := startManager(t, cfgA)
	cfgB, _, _ := testConfig(st, "b/1", tr)
	b := startManager(t, cfgB)
	ctx := context.Background()

	submit(t, a, "s1", "hello")
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 1)
	want := []agent.Message{{Role: "user", Content: "hello"}, {Role: "assistant", Content: "hello"}}

	local := state(t, a, "s1")
	if local.Source != SourceActor || !reflect.DeepEqual(messages(local.History), want) || local.Seq != 5 {
		t.Fatalf("local state = %+v", local)
	}
	remote := state(t, b, "s1")
	if remote.Source != SourceStore || !reflect.DeepEqual(messages(remote.History), want) || remote.Seq != 5 || remote.Epoch != 1 {
		t.Fatalf("remote state = %+v", remote)
	}
	none, err := b.State(ctx, "nobody", HistoryQuery{})
	if err != nil || none.Source != SourceNone || none.History == nil || len(none.History) != 0 {
		t.Fatalf("state of an unknown session = %+v, %v", none, err)
	}
	cfgC, _, _ := testConfig(st, "c/1", tr)
	broken := &faultyStore{SessionStore: st.store}
	broken.read.n.Store(-1)
	cfgC.Store = broken
	c := startManager(t, cfgC)
	down, err := c.State(ctx, "s1", HistoryQuery{})
	if err != nil || down.Source != SourceUnavailable || len(down.History) != 0 {
		t.Fatalf("state with the store down = %+v, %v", down, err)
	}
	if _, err := c.State(ctx, "bad id", HistoryQuery{}); !errors.Is(err, ErrInvalidID) {
		t.Fatalf("bad id: %v", err)
	}
}

func TestSubmitRefusedWhenThawFails(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, rec, _ := testConfig(st, "a/1", tr)
	broken := &faultyStore{SessionStore: st.store}
	broken.thaw.n.Store(-1)
	cfg.Store = broken
	m := startManager(t, cfg)
	_, err := m.Accept(context.Background(), "s1", textInput("x", ""))
	if !errors.Is(err, errTestStoreDown) || !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("submit with an unreadable store = %v", err)
	}
	if n := tr.Count(trace.Kind("session.thaw")); n != 0 || len(rec.all()) != 0 {
		t.Fatalf("thawed %d times, published %v", n, types(rec.all()))
	}
	waitGone(t, m, "s1")
}

// A turn's end that cannot be written proves nothing about ownership: after
// StoreAttempts tries the session stands down and the message is not
// published.
func TestTurnEndFailureStandsDownUnpublished(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, rec, _ := testConfig(st, "a/1", tr)
	fs := &faultyStore{SessionStore: st.store}
	fs.complete.n.Store(-1)
	cfg.Store = fs
	cfg.StoreAttempts = 2
	m := startManager(t, cfg)
	submit(t, m, "s1", "hello")
	waitFor(t, tr, trace.Kind("session.checkpoint.failed"), 1)
	waitFor(t, tr, trace.Kind("session.standdown", "session", "s1"), 1)
	waitGone(t, m, "s1")
	if got := types(rec.all()); !reflect.DeepEqual(got, []string{agent.TypeUserEvent, agent.TypeTurnStarted, agent.TypeDelta}) {
		t.Fatalf("published %v", got)
	}
	if n := fs.complete.calls.Load(); n != 2 {
		t.Fatalf("%d end-of-turn writes, want StoreAttempts = 2", n)
	}
	// The input is still in the inbox: the next owner runs it.
	if s := loadStored(t, st.store, "s1"); len(s.Inbox) != 1 || len(s.History) != 0 {
		t.Fatalf("stored after the stand-down = %+v, want the input in the inbox", s)
	}
}

// A transient store failure at a turn's end is retried: the turn completes
// with no stand-down.
func TestTurnEndRetriesTransientFailure(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, rec, _ := testConfig(st, "a/1", tr)
	fs := &faultyStore{SessionStore: st.store}
	fs.complete.n.Store(2)
	cfg.Store = fs
	m := startManager(t, cfg)
	submit(t, m, "s1", "hello")
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 1)
	if n := tr.Count(trace.Kind("session.checkpoint.retry")); n != 2 {
		t.Fatalf("%d retries, want 2", n)
	}
	if s := m.Stats(); s.StandDowns != 0 || s.StoreRetries != 2 || s.TurnsCompleted != 1 {
		t.Fatalf("stats = %+v", s)
	}
	if got := types(rec.all()); !reflect.DeepEqual(got, []string{agent.TypeUserEvent, agent.TypeTurnStarted, agent.TypeDelta, agent.TypeMessage, agent.TypeTurnCompleted}) {
		t.Fatalf("published %v", got)
	}
	if s := loadStored(t, st.store, "s1"); len(s.Inbox) != 0 || len(s.History) != 2 {
		t.Fatalf("stored = %+v, want the turn in the history and an empty inbox", s)
	}
}
