package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/redis/go-redis/v9"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/internal/trace"
)

// fakeClock is a Clock that moves only on Advance; timers fire when it
// passes their due time.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c    *fakeClock
	due  time.Time
	ch   chan time.Time
	done bool // fired or stopped
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, due: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.done = true
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock by d and fires every timer that is due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	keep := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.done:
		case !c.now.Before(t.due):
			t.done = true
			t.ch <- c.now
		default:
			keep = append(keep, t)
		}
	}
	c.timers = keep
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

// recorder is a Publisher that keeps what it was given. onEvent, if set,
// runs inside Publish (on the actor goroutine) before the event is kept.
type recorder struct {
	mu      sync.Mutex
	events  []agent.Event
	onEvent func(agent.Event)
}

func (r *recorder) Publish(_ context.Context, ev agent.Event) error {
	r.mu.Lock()
	hook := r.onEvent
	r.mu.Unlock()
	if hook != nil {
		hook(ev)
	}
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	return nil
}

func (r *recorder) setHook(f func(agent.Event)) {
	r.mu.Lock()
	r.onEvent = f
	r.mu.Unlock()
}

func (r *recorder) all() []agent.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]agent.Event(nil), r.events...)
}

func (r *recorder) ofType(typ string) []agent.Event {
	var out []agent.Event
	for _, ev := range r.all() {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// blockAgent streams its pre-deltas, reports the turn on started, then
// blocks until release is closed (returning "done") or ctx ends. After the
// release it emits post, if set, before returning.
type blockAgent struct {
	pre      []string
	post     string
	started  chan agent.Turn
	release  chan struct{}
	onCancel func(ctx context.Context) // runs when ctx ends while blocked
	postErr  chan error                // receives the emit error of post
}

func newBlockAgent() *blockAgent {
	return &blockAgent{started: make(chan agent.Turn, 64), release: make(chan struct{}), postErr: make(chan error, 64)}
}

func (b *blockAgent) Run(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error) {
	for _, d := range b.pre {
		if err := emit(ctx, agent.TypeDelta, deltaData{Text: d}); err != nil {
			return agent.Message{}, err
		}
	}
	b.started <- turn
	select {
	case <-b.release:
	case <-ctx.Done():
		if b.onCancel != nil {
			b.onCancel(ctx)
		}
		return agent.Message{}, ctx.Err()
	}
	if b.post != "" {
		err := emit(ctx, agent.TypeDelta, deltaData{Text: b.post})
		b.postErr <- err
		if err != nil {
			return agent.Message{}, err
		}
	}
	return agent.Message{Role: "assistant", Content: "done"}, nil
}

// flakyLeases wraps a LeaseStore; while failing is set, Claim fails as an
// unreachable store would.
type flakyLeases struct {
	LeaseStore
	failing atomic.Bool
}

var errStoreDown = errors.New("test: lease store unreachable")

func (f *flakyLeases) Claim(ctx context.Context, key, owner string, ttl time.Duration) (Lease, error) {
	if f.failing.Load() {
		return Lease{}, fmt.Errorf("claim %q: %w", key, errStoreDown)
	}
	return f.LeaseStore.Claim(ctx, key, owner, ttl)
}

// ClusterAdapters builds the cluster store adapters (session/pgstore,
// session/redisstore) for this package's in-package tests. Those packages
// import session, so a file of package session cannot import them;
// adapters_test.go (package session_test, linked into the same test
// binary) sets it in an init, before any test runs.
var ClusterAdapters *Adapters

// Adapters are constructors of the cluster store adapters.
type Adapters struct {
	LeaseStore   func(pool *pgxpool.Pool) LeaseStore
	SessionStore func(pool *pgxpool.Pool) SessionStore
	ReplayLog    func(client redis.UniversalClient, prefix string, maxLen int64, ttl time.Duration) ReplayLog
}

// clusterAdapters returns ClusterAdapters, failing t when no file set it.
func clusterAdapters(t *testing.T) *Adapters {
	t.Helper()
	if ClusterAdapters == nil {
		t.Fatal("session.ClusterAdapters is unset: adapters_test.go sets it")
	}
	return ClusterAdapters
}

// stores is one set of shared stores (as one database and one Redis would
// be for a cluster), plus a way to make store time pass.
type stores struct {
	leases LeaseStore
	store  SessionStore
	log    ReplayLog
	// advance makes d of store time pass for leases (and, for the memory
	// stores, for every store reading the same clock).
	advance func(t *testing.T, d time.Duration)
}

func memoryStores() *stores {
	clk := NewManualClock(time.Unix(1_700_000_000, 0))
	opt := WithMemoryClock(clk.Now)
	return &stores{
		leases:  NewMemoryLeaseStore(opt),
		store:   NewMemorySessionStore(opt),
		log:     NewMemoryReplayLog(10_000, 0, opt),
		advance: func(_ *testing.T, d time.Duration) { clk.Advance(d) },
	}
}

// testConfig is a Config on st with a fake clock (nothing times out unless
// the test advances it), a tracer and a recorder.
func testConfig(st *stores, owner string, tr *trace.Tracer) (Config, *recorder, *fakeClock) {
	rec := &recorder{}
	clk := newFakeClock()
	cfg := DefaultConfig()
	cfg.Owner = owner
	cfg.Agent = EchoAgent{}
	cfg.Leases = st.leases
	cfg.Store = st.store
	cfg.Log = st.log
	cfg.Publisher = rec
	cfg.Clock = clk
	cfg.Tracer = tr
	return cfg, rec, clk
}

func startManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	m := NewManager(cfg)
	t.Cleanup(m.Close)
	return m
}

// waitFor blocks until the tracer has seen an event matching m (n-th), or
// fails the test with the trace.
func waitFor(t *testing.T, tr *trace.Tracer, m trace.Matcher, n int) trace.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := tr.WaitForN(ctx, m, n)
	if err != nil {
		t.Fatalf("%v\ntrace:\n%s", err, tr.Dump())
	}
	return ev
}

func submit(t *testing.T, m *Manager, id, text string) Accepted {
	t.Helper()
	acc, err := m.Accept(context.Background(), id, textInput(text, ""))
	if err != nil {
		t.Fatalf("submit %q to %s: %v", text, id, err)
	}
	return acc
}

func textInput(text, key string) agent.Input {
	data, _ := json.Marshal(map[string]string{"text": text})
	return agent.Input{Type: "message", Data: data, IdempotencyKey: key}
}

// logEvents reads a session's whole replay log.
func logEvents(t *testing.T, l ReplayLog, id string) []agent.Event {
	t.Helper()
	evs, _, err := l.Since(context.Background(), id, agent.Position{}, 0)
	if err != nil {
		t.Fatalf("read log of %s: %v", id, err)
	}
	return evs
}

// assertIncreasing fails unless evs are in strictly increasing position
// and seq order.
func assertIncreasing(t *testing.T, evs []agent.Event) {
	t.Helper()
	for i := 1; i < len(evs); i++ {
		if !evs[i-1].Pos().Less(evs[i].Pos()) || evs[i-1].Seq >= evs[i].Seq {
			t.Fatalf("events %d and %d out of order: %v %s, %v %s", i-1, i, evs[i-1].Pos(), evs[i-1].Type, evs[i].Pos(), evs[i].Type)
		}
	}
}

// loadStored reads session id from the store: its state row, inbox and
// whole history (up to MaxHistoryPage messages).
func loadStored(t *testing.T, s SessionStore, id string) StoredSession {
	t.Helper()
	st, ok, err := s.Read(context.Background(), id, HistoryQuery{Limit: MaxHistoryPage})
	if err != nil || !ok {
		t.Fatalf("read session %s: ok %v err %v", id, ok, err)
	}
	return st
}

// messages returns the messages of stored history entries.
func messages(h []StoredMessage) []agent.Message {
	out := make([]agent.Message, len(h))
	for i, m := range h {
		out[i] = m.Message
	}
	return out
}

// state reads session id's State, newest page.
func state(t *testing.T, m *Manager, id string) State {
	t.Helper()
	st, err := m.State(context.Background(), id, HistoryQuery{})
	if err != nil {
		t.Fatalf("state of %s: %v", id, err)
	}
	return st
}

func types(evs []agent.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

func assertNoParkFailures(t *testing.T, tr *trace.Tracer) {
	t.Helper()
	if f := tr.Failures(); len(f) > 0 {
		t.Fatalf("park failures: %v", f)
	}
}

// forEachStores runs f against every store set: the memory stores, and the
// cluster stores (Postgres leases and checkpoints, Redis replay log).
func forEachStores(t *testing.T, f func(t *testing.T, newStores func(t *testing.T) *stores)) {
	t.Run("memory", func(t *testing.T) { f(t, func(*testing.T) *stores { return memoryStores() }) })
	t.Run("cluster", func(t *testing.T) { f(t, clusterStores) })
}

// clusterStores returns the Postgres lease and checkpoint stores on a fresh
// schema and the Redis replay log under a fresh key prefix. Lease time
// passes by moving expires_at into the past (the database clock itself
// cannot be moved).
func clusterStores(t *testing.T) *stores {
	pool := testenv.Postgres(t)
	client, prefix := testenv.Redis(t)
	return &stores{
		leases: clusterAdapters(t).LeaseStore(pool),
		store:  clusterAdapters(t).SessionStore(pool),
		log:    clusterAdapters(t).ReplayLog(client, prefix, 10_000, time.Hour),
		advance: func(t *testing.T, d time.Duration) {
			t.Helper()
			if _, err := pool.Exec(context.Background(), "UPDATE agent_leases SET expires_at = expires_at - $1::interval", d); err != nil {
				t.Fatalf("advance lease time by %v: %v", d, err)
			}
		},
	}
}
