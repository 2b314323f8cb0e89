package session

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/internal/trace"
)

// userEvents returns the texts of a log's user_events, in order.
func userEvents(t *testing.T, l ReplayLog, id string) []string {
	t.Helper()
	var out []string
	for _, ev := range logEventsOfType(t, l, id, agent.TypeUserEvent) {
		var d struct {
			Data struct{ Text string } `json:"data"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d.Data.Text)
	}
	return out
}

// An input whose inbox write fails is refused with nothing behind it: no
// user_event logged or published, no seq used (the next input takes the
// seq it would have had), nothing run later. Checked while a turn runs and
// while the session is idle.
func TestInboxWriteFailureRefusesAtomically(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, rec, _ := testConfig(st, "a/1", tr)
	ag := newBlockAgent()
	cfg.Agent = ag
	fs := &faultyStore{SessionStore: st.store}
	cfg.Store = fs
	m := startManager(t, cfg)
	ctx := context.Background()

	first := submit(t, m, "s1", "first")
	<-ag.started
	for _, phase := range []string{"running", "idle"} {
		before := state(t, m, "s1").Seq
		published := len(rec.all())
		fs.accept.n.Store(1)
		out := m.Submit(ctx, "s1", textInput("refused "+phase, "k-"+phase))
		if out.Kind != OutcomeRefused || !errors.Is(out.Err, ErrStoreUnavailable) || out.Retry.After <= 0 {
			t.Fatalf("%s: submit with the inbox write failing = %+v, want a refusal with a retry directive", phase, out)
		}
		if got := rec.all()[published:]; len(got) != 0 {
			t.Fatalf("%s: published %v for a refused input", phase, types(got))
		}
		if seq := state(t, m, "s1").Seq; seq != before {
			t.Fatalf("%s: seq %d after the refusal, was %d", phase, seq, before)
		}
		// The re-send (same key) is a new acceptance at the very next seq.
		acc, err := m.Accept(ctx, "s1", textInput("refused "+phase, "k-"+phase))
		if err != nil || acc.Duplicate || acc.Seq != before+1 {
			t.Fatalf("%s: re-send = %+v, %v; want a new event at seq %d", phase, acc, err, before+1)
		}
		if phase == "running" {
			close(ag.release)
			waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 2)
		}
	}
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 3)
	if got, want := userEvents(t, st.log, "s1"), []string{"first", "refused running", "refused idle"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("logged user events %v, want %v", got, want)
	}
	hist := messages(loadStored(t, st.store, "s1").History)
	if len(hist) != 6 || hist[0].Content != "first" || hist[2].Content != "refused running" || hist[4].Content != "refused idle" {
		t.Fatalf("history %v, want each accepted input once", hist)
	}
	evs := logEvents(t, st.log, "s1")
	for i, ev := range evs {
		if ev.Seq != first.Seq+int64(i) {
			t.Fatalf("log seq %d at index %d: a hole after %d", ev.Seq, i, first.Seq+int64(i)-1)
		}
	}
	if s := m.Stats(); s.InboxErrors != 2 || s.StandDowns != 0 {
		t.Fatalf("stats = %+v, want 2 inbox errors, no stand-down", s)
	}
}

// When a user_event is published, its input is already in the store's
// inbox: a crash of the owner right after cannot lose it.
func TestInputDurableBeforeUserEvent(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, rec, _ := testConfig(st, "a/1", tr)
	ag := newBlockAgent()
	cfg.Agent = ag
	m := startManager(t, cfg)
	inInbox := make(chan bool, 8)
	rec.setHook(func(ev agent.Event) {
		if ev.Type != agent.TypeUserEvent {
			return
		}
		found := false
		for _, e := range loadStored(t, st.store, "s1").Inbox {
			found = found || e.Pos() == ev.Pos()
		}
		inInbox <- found
	})
	submit(t, m, "s1", "idle start")
	<-ag.started
	submit(t, m, "s1", "queued")
	for range 2 {
		if !<-inInbox {
			t.Fatal("a user_event was published before its input was in the inbox")
		}
	}
	close(ag.release)
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 2)
}

// A new Manager on the same Postgres schema runs the inputs its dead
// predecessor accepted: the one whose turn was running (started again from
// the beginning) and the one queued behind it, each once, found by Recover
// without any new input.
func TestRecoverRunsInboxAfterCrash(t *testing.T) {
	st := clusterStores(t)
	tr := trace.New()
	cfgA, _, _ := testConfig(st, "a/1", tr)
	ag := newBlockAgent()
	cfgA.Agent = ag
	a := NewManager(cfgA) // abandoned mid-turn; closed at the end only
	defer a.Close()
	submit(t, a, "s1", "running when it died")
	<-ag.started
	submit(t, a, "s1", "queued when it died")

	st.advance(t, cfgA.LeaseTTL+time.Second) // a/1's lease lapses
	cfgB, recB, _ := testConfig(st, "b/1", tr)
	b := startManager(t, cfgB)
	n, err := b.Recover(context.Background(), 10)
	if err != nil || n != 1 {
		t.Fatalf("recover = %d, %v; want 1 session started", n, err)
	}
	waitFor(t, tr, trace.Kind("session.emit", "owner", "b/1", "type", agent.TypeTurnCompleted), 2)
	want := []agent.Message{
		{Role: "user", Content: "running when it died"}, {Role: "assistant", Content: "running when it died"},
		{Role: "user", Content: "queued when it died"}, {Role: "assistant", Content: "queued when it died"},
	}
	stored := loadStored(t, st.store, "s1")
	if !reflect.DeepEqual(messages(stored.History), want) || len(stored.Inbox) != 0 || stored.Epoch != 2 {
		t.Fatalf("stored = %+v, want epoch 2, %v, empty inbox", stored, want)
	}
	if n := len(recB.ofType(agent.TypeUserEvent)); n != 0 {
		t.Fatalf("b published %d user events; the inputs were accepted once, by a", n)
	}
	// The abandoned owner's turn end is fenced.
	close(ag.release)
	waitFor(t, tr, trace.Kind("session.fenced", "owner", "a/1"), 1)
	if n, err := b.Recover(context.Background(), 10); err != nil || n != 0 {
		t.Fatalf("second recover = %d, %v; want nothing left", n, err)
	}
}

// Through a real Postgres link cut at the inbox write (the lease store is
// elsewhere and answers): the input is refused, nothing is logged and no
// seq is used; once the link is back the next input lands at the next seq.
func TestInboxWriteRefusedWhilePostgresCut(t *testing.T) {
	ctx := context.Background()
	st, proxy, pool := proxiedSessionStore(t)
	tr := trace.New()
	cfg, rec, _ := testConfig(st, "a/1", tr)
	cfg.StoreTimeout = time.Second
	m := startManager(t, cfg)

	first := submit(t, m, "s1", "before the cut")
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 1)
	published := len(rec.all())
	seq := state(t, m, "s1").Seq
	proxy.Cut()
	pool.Reset() // no idle connection: the write cannot reach the server
	_, err := m.Accept(ctx, "s1", textInput("during the cut", "k-cut"))
	if !errors.Is(err, ErrStoreUnavailable) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("accept while Postgres is cut = %v, want ErrStoreUnavailable", err)
	}
	if got := rec.all()[published:]; len(got) != 0 {
		t.Fatalf("published %v during the cut", types(got))
	}
	proxy.Restore()
	acc, err := m.Accept(ctx, "s1", textInput("after the cut", "k-after"))
	if err != nil || acc.Seq != seq+1 || acc.Epoch != first.Epoch {
		t.Fatalf("accept after restore = %+v, %v; want %d-%d", acc, err, first.Epoch, seq+1)
	}
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 2)
	if got, want := userEvents(t, st.log, "s1"), []string{"before the cut", "after the cut"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("logged user events %v, want %v", got, want)
	}
	if s := m.Stats(); s.StandDowns != 0 {
		t.Fatalf("stats = %+v, want no stand-down", s)
	}
}

// Idempotency keys are remembered for IdempotencyTTL, measured on the
// database's clock: a key accepted 23 h ago still answers (duplicate, or
// refused with another body); at 25 h it is forgotten and the same key
// is a new event. Store time passes by moving accepted_at into the past.
func TestKeyRetentionOnDatabaseClock(t *testing.T) {
	pool := testenv.Postgres(t)
	st := &stores{leases: clusterAdapters(t).LeaseStore(pool), store: clusterAdapters(t).SessionStore(pool), log: NewMemoryReplayLog(1000, 0)}
	ctx := context.Background()
	age := func(d time.Duration) {
		t.Helper()
		if _, err := pool.Exec(ctx, "UPDATE session_keys SET accepted_at = accepted_at - $1::interval", d); err != nil {
			t.Fatal(err)
		}
	}
	tr := trace.New()
	// Each owner in turn: a fresh Manager that thaws the keys from the
	// store, then drains (hands the lease back).
	owner := func(name string, f func(m *Manager)) {
		cfg, _, _ := testConfig(st, name, tr)
		m := startManager(t, cfg)
		f(m)
		if err := m.Drain(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var first Accepted
	owner("a/1", func(m *Manager) {
		first = submitKey(t, m, "s1", "pay 10", "k1")
		waitFor(t, tr, trace.Kind("session.emit", "owner", "a/1", "type", agent.TypeTurnCompleted), 1)
	})
	age(23 * time.Hour)
	owner("b/1", func(m *Manager) {
		if _, err := m.Accept(ctx, "s1", textInput("pay 99", "k1")); !errors.Is(err, ErrIdempotencyKeyReused) {
			t.Fatalf("key at 23 h with another body = %v, want ErrIdempotencyKeyReused", err)
		}
		if dup := submitKey(t, m, "s1", "pay 10", "k1"); !dup.Duplicate || dup.Pos() != first.Pos() {
			t.Fatalf("key at 23 h, same body = %+v, want the duplicate of %+v", dup, first)
		}
	})
	age(2 * time.Hour)
	owner("c/1", func(m *Manager) {
		again := submitKey(t, m, "s1", "pay 99", "k1")
		if again.Duplicate || !first.Pos().Less(again.Pos()) {
			t.Fatalf("key at 25 h = %+v, want a new event after %+v", again, first)
		}
		waitFor(t, tr, trace.Kind("session.emit", "owner", "c/1", "type", agent.TypeTurnCompleted), 1)
	})
	var keys int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM session_keys WHERE idem_key = 'k1' AND accepted_at > now() - interval '1 hour'").Scan(&keys); err != nil || keys != 1 {
		t.Fatalf("k1 rows accepted within the hour: %d (%v), want the new acceptance", keys, err)
	}
}

func submitKey(t *testing.T, m *Manager, id, text, key string) Accepted {
	t.Helper()
	acc, err := m.Accept(context.Background(), id, textInput(text, key))
	if err != nil {
		t.Fatalf("submit %q (key %s) to %s: %v", text, key, id, err)
	}
	return acc
}

// An inbox write whose answer was lost (it landed, the store reported an
// unknown outcome) is repeated and the input accepted once. When no
// repetition is confirmed, the answer is ErrOutcomeUnknown (never a
// refusal), the session stands down, and the next owner runs the input
// that did land, once: its re-send is a duplicate.
func TestInboxWriteOutcomeUnknown(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, _, _ := testConfig(st, "a/1", tr)
	fs := &faultyStore{SessionStore: st.store}
	cfg.Store = fs
	m := startManager(t, cfg)
	ctx := context.Background()

	fs.acceptLands.n.Store(1)
	acc := submitKey(t, m, "s1", "answer lost once", "k1")
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 1)
	if n := tr.Count(trace.Kind("session.inbox.retry")); n != 1 {
		t.Fatalf("%d inbox retries, want 1", n)
	}

	fs.acceptLands.n.Store(-1)
	out := m.Submit(ctx, "s1", textInput("answer always lost", "k2"))
	if out.Kind != OutcomeFailed || !errors.Is(out.Err, ErrOutcomeUnknown) {
		t.Fatalf("submit with every answer lost = %v %v, want failed with ErrOutcomeUnknown", out.Kind, out.Err)
	}
	waitFor(t, tr, trace.Kind("session.standdown", "session", "s1"), 1)
	waitGone(t, m, "s1")
	fs.acceptLands.n.Store(0)

	dup := submitKey(t, m, "s1", "answer always lost", "k2")
	if !dup.Duplicate || dup.Epoch != acc.Epoch {
		t.Fatalf("re-send after the unknown outcome = %+v, want a duplicate at epoch %d", dup, acc.Epoch)
	}
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted, "epoch", acc.Epoch+1), 1)
	want := []agent.Message{{Role: "user", Content: "answer lost once"}, {Role: "assistant", Content: "answer lost once"}, {Role: "user", Content: "answer always lost"}, {Role: "assistant", Content: "answer always lost"}}
	if got := messages(state(t, m, "s1").History); !reflect.DeepEqual(got, want) {
		t.Fatalf("history %v, want each input once: %v", got, want)
	}
}

// A Postgres blip at a turn's end (the link cut through the TCP proxy just
// before the write, restored once a retry is under way) costs no
// stand-down: the write is retried, the turn completes once, and the
// session keeps its epoch.
func TestTurnEndSurvivesPostgresBlip(t *testing.T) {
	st, proxy, _ := proxiedSessionStore(t)
	tr := trace.New()
	cfg, rec, _ := testConfig(st, "a/1", tr)
	cfg.StoreTimeout = time.Second
	m := startManager(t, cfg)

	tr.Park(trace.Kind("session.checkpoint.before"), trace.Kind("test.cut"))
	tr.Park(trace.Kind("session.checkpoint.retry"), trace.Kind("test.restored"))
	first := submit(t, m, "s1", "through the blip")
	waitFor(t, tr, trace.Kind("session.checkpoint.before"), 1)
	proxy.Cut()
	tr.Emit("test.cut")
	waitFor(t, tr, trace.Kind("session.checkpoint.retry"), 1)
	proxy.Restore()
	tr.Emit("test.restored")
	waitFor(t, tr, trace.Kind("session.emit", "type", agent.TypeTurnCompleted), 1)
	assertNoParkFailures(t, tr)
	if s := m.Stats(); s.StandDowns != 0 || s.StoreRetries == 0 || s.TurnsCompleted != 1 {
		t.Fatalf("stats = %+v, want retries and no stand-down", s)
	}
	if got := types(rec.ofType(agent.TypeMessage)); len(got) != 1 {
		t.Fatalf("%d messages published, want 1", len(got))
	}
	stored := loadStored(t, st.store, "s1")
	if !reflect.DeepEqual(messages(stored.History), []agent.Message{{Role: "user", Content: "through the blip"}, {Role: "assistant", Content: "through the blip"}}) || len(stored.Inbox) != 0 {
		t.Fatalf("stored %+v, want the turn once and an empty inbox", stored)
	}
	if acc := submit(t, m, "s1", "after"); acc.Epoch != first.Epoch {
		t.Fatalf("accepted at %+v after the blip, want epoch %d kept", acc, first.Epoch)
	}
}

// proxiedSessionStore returns memory stores whose session store is a
// Postgres one reached through a cuttable TCP proxy (its own schema), and
// the proxy and the store's pool.
func proxiedSessionStore(t *testing.T) (*stores, *testenv.TCPProxy, *pgxpool.Pool) {
	t.Helper()
	dsn := testenv.PostgresURL(t)
	addr, err := testenv.HostPort(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.Proxy(t, addr)
	pool, err := pgxpool.New(context.Background(), proxy.URL(dsn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := memoryStores()
	st.store = clusterAdapters(t).SessionStore(pool)
	return st, proxy, pool
}
