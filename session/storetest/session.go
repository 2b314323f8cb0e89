package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/session"
)

// SessionFixture is one fresh, isolated SessionStore and a way to make
// store time pass for its idempotency keys.
type SessionFixture struct {
	Store session.SessionStore
	// Age makes d of store time pass for every idempotency key of session
	// key (the memory store advances its clock; Postgres moves accepted_at
	// into the past, the database clock itself cannot be moved).
	Age func(t *testing.T, key string, d time.Duration)
}

// SessionStoreSuite checks the SessionStore contract (docs/OWNERSHIP.md
// "Durable inbox and history"): the epoch fence on every write, the inbox
// kept until its turn completes, append-only numbered history and its
// pages, key retention on the store's clock, and inputs stored opaque. It
// calls newFixture once per subtest.
func SessionStoreSuite(t *testing.T, newFixture func(t *testing.T) SessionFixture) {
	ctx := context.Background()
	window := session.ThawQuery{HistoryWindow: 50, KeyTTL: 24 * time.Hour, MaxKeys: 1000}

	t.Run("ReadMissing", func(t *testing.T) {
		s := newFixture(t).Store
		if _, ok, err := s.Read(ctx, "k", session.HistoryQuery{Limit: 10}); err != nil || ok {
			t.Fatalf("read of nothing = ok %v err %v, want false nil", ok, err)
		}
	})

	t.Run("ThawCreates", func(t *testing.T) {
		s := newFixture(t).Store
		th := mustThaw(t, s, "k", 1, window)
		if th.FromEpoch != 0 || th.Seq != 0 || len(th.Inbox)+len(th.History)+len(th.Keys) != 0 {
			t.Fatalf("thaw of a new session = %+v, want empty at seq 0", th)
		}
		st := mustRead(t, s, "k", session.HistoryQuery{Limit: 10})
		if st.Epoch != 1 || st.Seq != 0 || st.Total != 0 {
			t.Fatalf("read after thaw = %+v", st)
		}
	})

	t.Run("InboxKeptUntilTurnCompletes", func(t *testing.T) {
		s := newFixture(t).Store
		mustThaw(t, s, "k", 1, window)
		one, two := entry(1, 1, "one", "key-1"), entry(1, 2, "two", "")
		mustAccept(t, s, "k", 1, one)
		mustAccept(t, s, "k", 1, two)
		th := mustThaw(t, s, "k", 2, window)
		if th.FromEpoch != 1 || th.Seq != 2 {
			t.Fatalf("thaw at 2 = from %d seq %d, want from 1 seq 2", th.FromEpoch, th.Seq)
		}
		assertInbox(t, th.Inbox, one, two)
		if len(th.Keys) != 1 || th.Keys[0].Key != "key-1" || th.Keys[0].Epoch != 1 || th.Keys[0].Seq != 1 || th.Keys[0].BodyHash != one.BodyHash {
			t.Fatalf("keys = %+v, want key-1 at 1-1 with its body hash", th.Keys)
		}
		msgs := []agent.Message{{Role: "user", Content: "one"}, {Role: "assistant", Content: "one"}}
		if err := s.CompleteTurn(ctx, "k", 2, session.TurnRecord{Input: agent.Position{Epoch: 1, Seq: 1}, Messages: msgs, Seq: 6}); err != nil {
			t.Fatalf("complete turn: %v", err)
		}
		st := mustRead(t, s, "k", session.HistoryQuery{Limit: 10})
		if st.Epoch != 2 || st.Seq != 6 || st.Total != 2 {
			t.Fatalf("read after the turn = epoch %d seq %d total %d, want 2 6 2", st.Epoch, st.Seq, st.Total)
		}
		assertInbox(t, st.Inbox, two)
		want := []session.StoredMessage{
			{N: 1, Turn: agent.Position{Epoch: 1, Seq: 1}, Message: msgs[0]},
			{N: 2, Turn: agent.Position{Epoch: 1, Seq: 1}, Message: msgs[1]},
		}
		if !reflect.DeepEqual(st.History, want) {
			t.Fatalf("history = %+v, want %+v", st.History, want)
		}
		// The seq never goes down.
		if err := s.CompleteTurn(ctx, "k", 2, session.TurnRecord{Input: agent.Position{Epoch: 1, Seq: 2}, Seq: 3}); err != nil {
			t.Fatal(err)
		}
		if st := mustRead(t, s, "k", session.HistoryQuery{Limit: 10}); st.Seq != 6 || len(st.Inbox) != 0 {
			t.Fatalf("after a turn with no messages: seq %d inbox %+v, want 6 and empty", st.Seq, st.Inbox)
		}
	})

	t.Run("TurnAttemptsCountedFenced", func(t *testing.T) {
		s := newFixture(t).Store
		mustThaw(t, s, "k", 1, window)
		one, two := entry(1, 1, "one", ""), entry(1, 2, "two", "")
		mustAccept(t, s, "k", 1, one)
		mustAccept(t, s, "k", 1, two)
		pos := agent.Position{Epoch: 1, Seq: 1}
		if err := s.StartTurn(ctx, "k", 1, pos, 1); err != nil {
			t.Fatalf("start turn: %v", err)
		}
		mustThaw(t, s, "k", 2, window)
		if err := s.StartTurn(ctx, "k", 1, pos, 5); !errors.Is(err, session.ErrFenced) {
			t.Fatalf("start turn at a stale epoch = %v, want ErrFenced", err)
		}
		for _, a := range []int{2, 2, 1} { // repeated and late writes never lower it
			if err := s.StartTurn(ctx, "k", 2, pos, a); err != nil {
				t.Fatalf("start turn attempt %d: %v", a, err)
			}
		}
		mustAccept(t, s, "k", 2, one) // a repeated accept keeps the count
		th := mustThaw(t, s, "k", 3, window)
		if len(th.Inbox) != 2 || th.Inbox[0].Attempts != 2 || th.Inbox[1].Attempts != 0 {
			t.Fatalf("inbox attempts after thaw = %+v, want 2 and 0", th.Inbox)
		}
		if err := s.CompleteTurn(ctx, "k", 3, session.TurnRecord{Input: pos, Seq: 4}); err != nil {
			t.Fatal(err)
		}
		if err := s.StartTurn(ctx, "k", 3, pos, 3); err != nil { // entry gone: nothing to count
			t.Fatalf("start turn of a completed input: %v", err)
		}
		if st := mustRead(t, s, "k", session.HistoryQuery{Limit: 10}); len(st.Inbox) != 1 || st.Inbox[0].Seq != 2 || st.Inbox[0].Attempts != 0 {
			t.Fatalf("inbox after the turn = %+v, want only 1-2, never started", st.Inbox)
		}
	})

	t.Run("DoubleTextingSetOnceByAccept", func(t *testing.T) {
		s := newFixture(t).Store
		if th := mustThaw(t, s, "k", 1, window); th.DoubleTexting != "" {
			t.Fatalf("a new session's mode = %q, want none", th.DoubleTexting)
		}
		one := entry(1, 1, "one", "")
		one.DoubleTexting = session.MultitaskReject
		mustAccept(t, s, "k", 1, one)
		two := entry(1, 2, "two", "")
		two.DoubleTexting = session.MultitaskInterrupt
		mustAccept(t, s, "k", 1, two)
		// A stale writer sets nothing.
		mustThaw(t, s, "k", 2, window)
		stale := entry(1, 3, "three", "")
		stale.DoubleTexting = session.MultitaskEnqueue
		if err := s.Accept(ctx, "k", 1, stale, time.Hour); !errors.Is(err, session.ErrFenced) {
			t.Fatalf("stale accept: %v, want ErrFenced", err)
		}
		th := mustThaw(t, s, "k", 3, window)
		if th.DoubleTexting != session.MultitaskReject {
			t.Fatalf("mode = %q, want %q (the first accept's, kept)", th.DoubleTexting, session.MultitaskReject)
		}
		for _, e := range th.Inbox {
			if e.DoubleTexting != "" {
				t.Fatalf("inbox entry %v carries the mode %q; it is the session's", e.Pos(), e.DoubleTexting)
			}
		}
		if other := mustThaw(t, s, "other", 1, window); other.DoubleTexting != "" {
			t.Fatalf("another session's mode = %q, want none", other.DoubleTexting)
		}
	})

	t.Run("RepeatedWritesLandOnce", func(t *testing.T) {
		s := newFixture(t).Store
		mustThaw(t, s, "k", 1, window)
		e := entry(1, 1, "once", "key-1")
		mustAccept(t, s, "k", 1, e)
		mustAccept(t, s, "k", 1, e)
		if st := mustRead(t, s, "k", session.HistoryQuery{Limit: 10}); len(st.Inbox) != 1 {
			t.Fatalf("inbox after a repeated accept = %+v, want one entry", st.Inbox)
		}
		rec := session.TurnRecord{Input: e.Pos(), Seq: 5, Messages: []agent.Message{{Role: "user", Content: "once"}, {Role: "assistant", Content: "once"}}}
		for range 2 {
			if err := s.CompleteTurn(ctx, "k", 1, rec); err != nil {
				t.Fatal(err)
			}
		}
		if st := mustRead(t, s, "k", session.HistoryQuery{Limit: 10}); st.Total != 2 || len(st.History) != 2 || len(st.Inbox) != 0 {
			t.Fatalf("after a repeated turn end: total %d history %+v inbox %+v, want the turn once", st.Total, st.History, st.Inbox)
		}
	})

	t.Run("StaleEpochFencedOnEveryWrite", func(t *testing.T) {
		s := newFixture(t).Store
		mustThaw(t, s, "k", 1, window)
		mustAccept(t, s, "k", 1, entry(1, 1, "kept", "key-1"))
		mustThaw(t, s, "k", 3, window)
		if err := s.Accept(ctx, "k", 2, entry(2, 2, "stale", "key-2"), time.Hour); !errors.Is(err, session.ErrFenced) {
			t.Fatalf("stale accept = %v, want ErrFenced", err)
		}
		rec := session.TurnRecord{Input: agent.Position{Epoch: 1, Seq: 1}, Messages: []agent.Message{{Role: "user", Content: "kept"}}, Seq: 99}
		if err := s.CompleteTurn(ctx, "k", 2, rec); !errors.Is(err, session.ErrFenced) {
			t.Fatalf("stale complete turn = %v, want ErrFenced", err)
		}
		if _, err := s.Thaw(ctx, "k", 2, window); !errors.Is(err, session.ErrFenced) {
			t.Fatalf("stale thaw = %v, want ErrFenced", err)
		}
		th := mustThaw(t, s, "k", 3, window)
		if th.Seq != 1 || len(th.History) != 0 || len(th.Keys) != 1 {
			t.Fatalf("after fenced writes: %+v, want nothing of them", th)
		}
		assertInbox(t, th.Inbox, entry(1, 1, "kept", "key-1"))
		if err := s.Accept(ctx, "never-thawed", 1, entry(1, 1, "x", ""), time.Hour); !errors.Is(err, session.ErrFenced) {
			t.Fatalf("accept without a thawed row = %v, want ErrFenced", err)
		}
	})

	t.Run("HistoryPagesAndWindow", func(t *testing.T) {
		s := newFixture(t).Store
		mustThaw(t, s, "k", 1, window)
		for i := 1; i <= 25; i++ {
			mustAccept(t, s, "k", 1, entry(1, int64(i), fmt.Sprint("q", i), ""))
			msgs := []agent.Message{{Role: "user", Content: fmt.Sprint("q", i)}, {Role: "assistant", Content: fmt.Sprint("a", i)}}
			if err := s.CompleteTurn(ctx, "k", 1, session.TurnRecord{Input: agent.Position{Epoch: 1, Seq: int64(i)}, Messages: msgs, Seq: int64(i)}); err != nil {
				t.Fatal(err)
			}
		}
		page := mustRead(t, s, "k", session.HistoryQuery{Limit: 10})
		assertNumbers(t, page.History, 41, 50)
		if page.Total != 50 || page.History[9].Content != "a25" {
			t.Fatalf("newest page: total %d, last %+v", page.Total, page.History[9])
		}
		page = mustRead(t, s, "k", session.HistoryQuery{Before: 41, Limit: 10})
		assertNumbers(t, page.History, 31, 40)
		page = mustRead(t, s, "k", session.HistoryQuery{Before: 4, Limit: 10})
		assertNumbers(t, page.History, 1, 3)
		if page = mustRead(t, s, "k", session.HistoryQuery{Before: 1, Limit: 10}); len(page.History) != 0 {
			t.Fatalf("page before 1 = %+v, want empty", page.History)
		}
		th := mustThaw(t, s, "k", 2, session.ThawQuery{HistoryWindow: 5, KeyTTL: time.Hour, MaxKeys: 10})
		assertNumbers(t, th.History, 46, 50)
	})

	t.Run("KeysExpireOnStoreClock", func(t *testing.T) {
		f := newFixture(t)
		s := f.Store
		mustThaw(t, s, "k", 1, window)
		mustAccept(t, s, "k", 1, entry(1, 1, "a", "key-a"))
		f.Age(t, "k", 2*time.Second)
		mustAccept(t, s, "k", 1, entry(1, 2, "b", "key-b"))
		f.Age(t, "k", 2*time.Second)
		mustAccept(t, s, "k", 1, entry(1, 3, "c", "key-c"))
		th := mustThaw(t, s, "k", 1, session.ThawQuery{KeyTTL: time.Hour, MaxKeys: 2})
		if got := keyNames(th.Keys); got != "key-b,key-c" {
			t.Fatalf("newest 2 keys = %s, want key-b,key-c (oldest first)", got)
		}
		if a := th.Keys[0].Age; a < 2*time.Second || a > time.Hour {
			t.Fatalf("key-b age %v, want about 2 s", a)
		}
		th = mustThaw(t, s, "k", 1, session.ThawQuery{KeyTTL: 3 * time.Second, MaxKeys: 10})
		if got := keyNames(th.Keys); got != "key-b,key-c" {
			t.Fatalf("keys within 3 s = %s, want key-b,key-c", got)
		}
		// Past the retention a key is pruned by the next accept, and
		// re-accepting it records the new event.
		f.Age(t, "k", 24*time.Hour)
		mustAccept(t, s, "k", 1, entry(1, 4, "a again", "key-a"))
		th = mustThaw(t, s, "k", 1, session.ThawQuery{KeyTTL: 1000 * time.Hour, MaxKeys: 10})
		if got := keyNames(th.Keys); got != "key-a" || th.Keys[0].Seq != 4 {
			t.Fatalf("keys after the retention = %+v, want key-a alone at seq 4 (b and c pruned)", th.Keys)
		}
	})

	t.Run("LookupKeyWithinRetention", func(t *testing.T) {
		f := newFixture(t)
		s := f.Store
		ctx := context.Background()
		if _, ok, err := s.LookupKey(ctx, "k", "key-a", time.Hour); ok || err != nil {
			t.Fatalf("lookup in a missing session = %v, %v; want not found", ok, err)
		}
		mustThaw(t, s, "k", 1, window)
		e := entry(1, 1, "a", "key-a")
		mustAccept(t, s, "k", 1, e)
		f.Age(t, "k", 2*time.Second)
		rec, ok, err := s.LookupKey(ctx, "k", "key-a", time.Hour)
		if err != nil || !ok || rec.Key != "key-a" || rec.Epoch != 1 || rec.Seq != 1 || rec.BodyHash != e.BodyHash ||
			rec.Age < 2*time.Second || rec.Age > time.Hour {
			t.Fatalf("lookup = %+v, %v, %v; want key-a at 1-1 with its hash, about 2 s old", rec, ok, err)
		}
		if _, ok, _ := s.LookupKey(ctx, "k", "key-a", time.Second); ok {
			t.Fatal("a key older than the retention was found")
		}
		if _, ok, _ := s.LookupKey(ctx, "k", "key-b", time.Hour); ok {
			t.Fatal("a key never accepted was found")
		}
	})

	t.Run("InputsStoredOpaque", func(t *testing.T) {
		s := newFixture(t).Store
		mustThaw(t, s, "k", 1, window)
		datas := []string{
			`{"text":"\u0000"}`,
			`{"text":"\ud800"}`,
			`{"n":1e200000}`,
			strings.Repeat(`{"a":`, 500) + `1` + strings.Repeat(`}`, 500),
			`{"text":"é 日本 🎉"}`,
			// Deeper than any JSON decoder accepts: the store never parses data.
			strings.Repeat(`[`, 20000) + strings.Repeat(`]`, 20000),
		}
		var want []session.InboxEntry
		for i, d := range datas {
			e := session.InboxEntry{Epoch: 1, Seq: int64(i + 1), Input: agent.Input{Type: "message", Data: json.RawMessage(d)}}
			e.BodyHash = session.InputHash(e.Input)
			mustAccept(t, s, "k", 1, e)
			want = append(want, e)
		}
		assertInbox(t, mustThaw(t, s, "k", 1, window).Inbox, want...)
		msgs := []agent.Message{{Role: "user", Content: "nul \x00 here"}, {Role: "assistant", Content: "\ufffd"}}
		if err := s.CompleteTurn(ctx, "k", 1, session.TurnRecord{Input: agent.Position{Epoch: 1, Seq: 1}, Messages: msgs, Seq: 9}); err != nil {
			t.Fatalf("complete turn with a NUL in a message: %v", err)
		}
		if h := mustRead(t, s, "k", session.HistoryQuery{Limit: 10}).History; len(h) != 2 || h[0].Message != msgs[0] || h[1].Message != msgs[1] {
			t.Fatalf("history = %+v, want %+v", h, msgs)
		}
	})

	t.Run("UnfinishedListsNonEmptyInboxes", func(t *testing.T) {
		s := newFixture(t).Store
		for _, k := range []string{"busy", "done", "idle"} {
			mustThaw(t, s, k, 1, window)
		}
		mustAccept(t, s, "busy", 1, entry(1, 1, "x", ""))
		mustAccept(t, s, "done", 1, entry(1, 1, "y", ""))
		if err := s.CompleteTurn(ctx, "done", 1, session.TurnRecord{Input: agent.Position{Epoch: 1, Seq: 1}, Seq: 3}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Unfinished(ctx, 10)
		if err != nil || len(got) != 1 || got[0] != "busy" {
			t.Fatalf("unfinished = %v, %v; want [busy]", got, err)
		}
		if got, err := s.Unfinished(ctx, 0); err != nil || len(got) != 0 {
			t.Fatalf("unfinished with limit 0 = %v, %v", got, err)
		}
	})

	t.Run("SessionsAreIndependent", func(t *testing.T) {
		s := newFixture(t).Store
		mustThaw(t, s, "a", 9, window)
		mustThaw(t, s, "b", 1, window)
		mustAccept(t, s, "b", 1, entry(1, 1, "b", "same-key"))
		if st := mustRead(t, s, "a", session.HistoryQuery{Limit: 10}); st.Epoch != 9 || len(st.Inbox) != 0 {
			t.Fatalf("a = %+v", st)
		}
		if th := mustThaw(t, s, "a", 9, window); len(th.Keys) != 0 {
			t.Fatalf("a's keys = %+v, want none", th.Keys)
		}
	})

	t.Run("ConcurrentThawsNewestEpochWins", func(t *testing.T) {
		s := newFixture(t).Store
		const writers = 6
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			wg.Go(func() {
				if _, err := s.Thaw(ctx, "k", int64(w+1), window); err != nil && !errors.Is(err, session.ErrFenced) {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("thaw: %v", err)
		}
		if st := mustRead(t, s, "k", session.HistoryQuery{Limit: 1}); st.Epoch != writers {
			t.Fatalf("final epoch = %d, want %d", st.Epoch, writers)
		}
	})
}

func entry(epoch, seq int64, text, key string) session.InboxEntry {
	data, _ := json.Marshal(map[string]string{"text": text})
	in := agent.Input{Type: "message", Data: data, IdempotencyKey: key}
	return session.InboxEntry{Epoch: epoch, Seq: seq, Input: in, BodyHash: session.InputHash(in)}
}

func mustThaw(t *testing.T, s session.SessionStore, key string, epoch int64, q session.ThawQuery) session.Thawed {
	t.Helper()
	th, err := s.Thaw(context.Background(), key, epoch, q)
	if err != nil {
		t.Fatalf("thaw %s at %d: %v", key, epoch, err)
	}
	return th
}

func mustAccept(t *testing.T, s session.SessionStore, key string, epoch int64, e session.InboxEntry) {
	t.Helper()
	if err := s.Accept(context.Background(), key, epoch, e, 24*time.Hour); err != nil {
		t.Fatalf("accept %s %d-%d: %v", key, e.Epoch, e.Seq, err)
	}
}

func mustRead(t *testing.T, s session.SessionStore, key string, q session.HistoryQuery) session.StoredSession {
	t.Helper()
	st, ok, err := s.Read(context.Background(), key, q)
	if err != nil || !ok {
		t.Fatalf("read %s: ok %v err %v", key, ok, err)
	}
	return st
}

// assertInbox compares inbox entries, their data by bytes after removing
// insignificant whitespace.
func assertInbox(t *testing.T, got []session.InboxEntry, want ...session.InboxEntry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("inbox has %d entries, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		var gd, wd bytes.Buffer
		_ = json.Compact(&gd, g.Input.Data)
		_ = json.Compact(&wd, w.Input.Data)
		if g.Epoch != w.Epoch || g.Seq != w.Seq || g.BodyHash != w.BodyHash || g.Input.Type != w.Input.Type ||
			g.Input.IdempotencyKey != w.Input.IdempotencyKey || !bytes.Equal(gd.Bytes(), wd.Bytes()) {
			t.Fatalf("inbox[%d] = %d-%d %s %q, want %d-%d %s %q", i, g.Epoch, g.Seq, g.Input.Data, g.Input.IdempotencyKey, w.Epoch, w.Seq, w.Input.Data, w.Input.IdempotencyKey)
		}
	}
}

func assertNumbers(t *testing.T, h []session.StoredMessage, from, to int64) {
	t.Helper()
	if int64(len(h)) != to-from+1 {
		t.Fatalf("page has %d messages, want %d..%d", len(h), from, to)
	}
	for i, m := range h {
		if m.N != from+int64(i) {
			t.Fatalf("page[%d].N = %d, want %d", i, m.N, from+int64(i))
		}
	}
}

func keyNames(ks []session.KeyRecord) string {
	names := make([]string, len(ks))
	for i, k := range ks {
		names[i] = k.Key
	}
	return strings.Join(names, ",")
}
