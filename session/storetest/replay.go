package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/session"
)

// ReplayFixture is one fresh replay log with no sessions.
type ReplayFixture struct {
	Log session.ReplayLog
	// Advance makes d of store time pass for every session log, so logs whose
	// TTL runs out within d expire.
	Advance func(t *testing.T, d time.Duration)
}

// ReplayLogSuite checks the ReplayLog rules (ordering, fence, trimming,
// expiry and the completeness watermark; see session.MemoryReplayLog) against
// the logs newFixture returns for the given per-session length bound and TTL;
// it calls newFixture once per subtest.
func ReplayLogSuite(t *testing.T, newFixture func(t *testing.T, maxLen int64, ttl time.Duration) ReplayFixture) {
	const ttl = time.Minute
	ctx := context.Background()

	t.Run("EmptyLog", func(t *testing.T) {
		f := newFixture(t, 100, ttl)
		assertSince(t, f.Log, "s", agent.Position{}, 0, nil, true)
		// A caller holding a position saw a log that is gone now.
		assertSince(t, f.Log, "s", agent.Position{Epoch: 1, Seq: 3}, 0, nil, false)
	})

	t.Run("AppendThenSince", func(t *testing.T) {
		f := newFixture(t, 100, ttl)
		at := time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)
		for s := int64(1); s <= 5; s++ {
			ev := agent.Event{Session: "s", Epoch: 1, Seq: s, Type: agent.TypeDelta,
				Data: fmt.Appendf(nil, `{"text":"part %d"}`, s), At: at.Add(time.Duration(s) * time.Second)}
			if err := f.Log.Append(ctx, ev); err != nil {
				t.Fatalf("append %v: %v", ev.Pos(), err)
			}
		}
		evs, complete, err := f.Log.Since(ctx, "s", agent.Position{}, 0)
		if err != nil || !complete || len(evs) != 5 {
			t.Fatalf("since 0 = %d events complete %v err %v, want 5 true nil", len(evs), complete, err)
		}
		for i, ev := range evs {
			s := int64(i + 1)
			if ev.Session != "s" || ev.Epoch != 1 || ev.Seq != s || ev.Type != agent.TypeDelta ||
				!ev.At.Equal(at.Add(time.Duration(s)*time.Second)) {
				t.Fatalf("event %d = %+v", i, ev)
			}
			assertJSONEqual(t, ev.Data, fmt.Appendf(nil, `{"text":"part %d"}`, s))
		}
		assertSince(t, f.Log, "s", pos(1, 3), 0, []agent.Position{pos(1, 4), pos(1, 5)}, true)
		assertSince(t, f.Log, "s", pos(1, 1), 2, []agent.Position{pos(1, 2), pos(1, 3)}, true)
		assertSince(t, f.Log, "s", pos(1, 5), 0, nil, true)
		assertSince(t, f.Log, "s", pos(9, 9), 0, nil, true)
	})

	t.Run("PrevKept", func(t *testing.T) {
		f := newFixture(t, 100, ttl)
		mustAppend(t, f.Log, "s", pos(1, 1))
		ev := event("s", pos(2, 2))
		prev := pos(1, 1)
		ev.Prev = &prev
		if err := f.Log.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
		evs, _, err := f.Log.Since(ctx, "s", agent.Position{}, 0)
		if err != nil || len(evs) != 2 || evs[0].Prev != nil || evs[1].Prev == nil || *evs[1].Prev != prev {
			t.Fatalf("since 0 = %+v, %v; want Prev only on 2-2, at 1-1", evs, err)
		}
	})

	t.Run("FencedAtOrBelowTop", func(t *testing.T) {
		f := newFixture(t, 100, ttl)
		mustAppend(t, f.Log, "s", pos(2, 10))
		for _, p := range []agent.Position{pos(2, 10), pos(2, 9), pos(1, 11)} {
			err := f.Log.Append(ctx, event("s", p))
			if !errors.Is(err, session.ErrFenced) {
				t.Fatalf("append %v under top 2-10 = %v, want ErrFenced", p, err)
			}
		}
		// A new epoch is above the top even with a lower seq.
		mustAppend(t, f.Log, "s", pos(3, 8))
		assertSince(t, f.Log, "s", pos(2, 9), 0, []agent.Position{pos(2, 10), pos(3, 8)}, true)
	})

	t.Run("ZeroPositionRefused", func(t *testing.T) {
		f := newFixture(t, 100, ttl)
		if err := f.Log.Append(ctx, event("s", agent.Position{})); err == nil {
			t.Fatal("append at 0-0 succeeded")
		}
	})

	t.Run("TrimmingMakesOlderPositionsIncomplete", func(t *testing.T) {
		f := newFixture(t, 3, ttl)
		for s := int64(1); s <= 5; s++ {
			mustAppend(t, f.Log, "s", pos(1, s))
		}
		kept := []agent.Position{pos(1, 3), pos(1, 4), pos(1, 5)}
		assertSince(t, f.Log, "s", agent.Position{}, 0, kept, false)
		assertSince(t, f.Log, "s", pos(1, 1), 0, kept, false)
		// Everything after 1-2 is still there.
		assertSince(t, f.Log, "s", pos(1, 2), 0, kept, true)
		assertSince(t, f.Log, "s", pos(1, 4), 0, []agent.Position{pos(1, 5)}, true)
	})

	t.Run("FreshLogStartingAtSeqOneIsComplete", func(t *testing.T) {
		f := newFixture(t, 100, ttl)
		mustAppend(t, f.Log, "s", pos(3, 1))
		assertSince(t, f.Log, "s", agent.Position{}, 0, []agent.Position{pos(3, 1)}, true)
	})

	t.Run("FreshLogStartingLaterIsIncompleteBeforeIt", func(t *testing.T) {
		f := newFixture(t, 100, ttl)
		mustAppend(t, f.Log, "s", pos(2, 8))
		assertSince(t, f.Log, "s", agent.Position{}, 0, []agent.Position{pos(2, 8)}, false)
		assertSince(t, f.Log, "s", pos(1, 12), 0, []agent.Position{pos(2, 8)}, false)
		assertSince(t, f.Log, "s", pos(2, 7), 0, []agent.Position{pos(2, 8)}, true)
	})

	t.Run("ExpiryDropsTheLog", func(t *testing.T) {
		f := newFixture(t, 100, ttl)
		mustAppend(t, f.Log, "s", pos(1, 1))
		mustAppend(t, f.Log, "s", pos(1, 2))
		f.Advance(t, ttl+time.Second)
		assertSince(t, f.Log, "s", pos(1, 2), 0, nil, false)
		assertSince(t, f.Log, "s", agent.Position{}, 0, nil, true)
		// The next owner continues; the new log does not reach back to 1-2.
		mustAppend(t, f.Log, "s", pos(2, 3))
		assertSince(t, f.Log, "s", pos(1, 2), 0, []agent.Position{pos(2, 3)}, false)
		assertSince(t, f.Log, "s", pos(2, 2), 0, []agent.Position{pos(2, 3)}, true)
	})

	t.Run("AppendRefreshesTTL", func(t *testing.T) {
		f := newFixture(t, 100, ttl)
		mustAppend(t, f.Log, "s", pos(1, 1))
		f.Advance(t, ttl/2)
		mustAppend(t, f.Log, "s", pos(1, 2))
		f.Advance(t, ttl/2+time.Second)
		assertSince(t, f.Log, "s", agent.Position{}, 0, []agent.Position{pos(1, 1), pos(1, 2)}, true)
	})

	t.Run("Top", func(t *testing.T) {
		f := newFixture(t, 3, ttl)
		assertTop(t, f.Log, "s", agent.Position{}, false)
		for s := int64(1); s <= 5; s++ {
			mustAppend(t, f.Log, "s", pos(1, s))
			assertTop(t, f.Log, "s", pos(1, s), true)
		}
		mustAppend(t, f.Log, "s", pos(2, 4)) // a new epoch may step the seq back
		assertTop(t, f.Log, "s", pos(2, 4), true)
		assertTop(t, f.Log, "other", agent.Position{}, false)
		f.Advance(t, ttl+time.Second)
		assertTop(t, f.Log, "s", agent.Position{}, false)
	})

	t.Run("SessionsAreIndependent", func(t *testing.T) {
		f := newFixture(t, 2, ttl)
		for s := int64(1); s <= 4; s++ {
			mustAppend(t, f.Log, "a", pos(1, s))
		}
		mustAppend(t, f.Log, "b", pos(1, 1))
		assertSince(t, f.Log, "b", agent.Position{}, 0, []agent.Position{pos(1, 1)}, true)
		assertSince(t, f.Log, "a", agent.Position{}, 0, []agent.Position{pos(1, 3), pos(1, 4)}, false)
	})
}

func pos(epoch, seq int64) agent.Position { return agent.Position{Epoch: epoch, Seq: seq} }

func event(id string, p agent.Position) agent.Event {
	return agent.Event{Session: id, Epoch: p.Epoch, Seq: p.Seq, Type: agent.TypeDelta,
		Data: []byte(`{}`), At: time.Unix(1700000000, 0).UTC()}
}

func mustAppend(t *testing.T, l session.ReplayLog, id string, p agent.Position) {
	t.Helper()
	if err := l.Append(context.Background(), event(id, p)); err != nil {
		t.Fatalf("append %s %v: %v", id, p, err)
	}
}

func assertSince(t *testing.T, l session.ReplayLog, id string, after agent.Position, limit int, want []agent.Position, wantComplete bool) {
	t.Helper()
	evs, complete, err := l.Since(context.Background(), id, after, limit)
	if err != nil {
		t.Fatalf("since %s %v: %v", id, after, err)
	}
	got := make([]agent.Position, 0, len(evs))
	for _, ev := range evs {
		got = append(got, ev.Pos())
	}
	if fmt.Sprint(got) != fmt.Sprint(append([]agent.Position{}, want...)) || complete != wantComplete {
		t.Fatalf("since %s %v = %v complete %v, want %v complete %v", id, after, got, complete, want, wantComplete)
	}
}

func assertTop(t *testing.T, l session.ReplayLog, id string, want agent.Position, wantOK bool) {
	t.Helper()
	top, ok, err := l.Top(context.Background(), id)
	if err != nil || top != want || ok != wantOK {
		t.Fatalf("top %s = %v %v %v, want %v %v", id, top, ok, err, want, wantOK)
	}
}

// assertJSONEqual compares two JSON documents by value (whitespace and key
// order aside).
func assertJSONEqual(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got invalid JSON %q: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("want invalid JSON %q: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("JSON = %s, want %s", bytes.TrimSpace(got), bytes.TrimSpace(want))
	}
}
