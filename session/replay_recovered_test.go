package session_test

import (
	"context"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/redisstore"
)

// recoveredLog is a replay log of the recovered table with a way to make
// one session's log expire.
type recoveredLog struct {
	log    session.ReplayLog
	expire func(t *testing.T, id string)
}

func recoveredLogs(t *testing.T, maxLen int) map[string]recoveredLog {
	t.Helper()
	clock := session.NewManualClock(time.Unix(1700000000, 0))
	mem := session.NewMemoryReplayLog(maxLen, time.Minute, session.WithMemoryClock(clock.Now))
	client, prefix := testenv.Redis(t)
	red := redisstore.NewReplayLog(client, redisstore.ReplayConfig{Prefix: prefix, MaxLen: int64(maxLen), TTL: time.Minute})
	return map[string]recoveredLog{
		// The memory log expires every session at once; each case appends
		// to its own session after the expiry it needs, so the table keeps
		// that order (see the expire flags below).
		"memory": {log: mem, expire: func(*testing.T, string) { clock.Advance(time.Minute + time.Second) }},
		// An expired Redis key is a deleted one.
		"redis": {log: red, expire: func(t *testing.T, id string) {
			if err := client.Del(context.Background(), red.Key(id)).Err(); err != nil {
				t.Fatal(err)
			}
		}},
	}
}

// TestReplayRecovered: recovered is true exactly when the joiner, after the
// replay, holds every event of the session after its cursor, decided from
// the log and, where the log cannot say, from the session's head (its
// owner's or its store's position).
func TestReplayRecovered(t *testing.T) {
	p := func(e, s int64) agent.Position { return agent.Position{Epoch: e, Seq: s} }
	head := func(h agent.Position) session.SessionHead {
		return func(context.Context) (agent.Position, bool) { return h, true }
	}
	unreadable := func(context.Context) (agent.Position, bool) { return agent.Position{}, false }
	type logged struct {
		at   agent.Position
		prev *agent.Position
	}
	seqs := func(epoch int64, from, to int64) []logged {
		var out []logged
		for s := from; s <= to; s++ {
			out = append(out, logged{at: p(epoch, s)})
		}
		return out
	}
	withPrev := func(at, prev agent.Position) logged { return logged{at: at, prev: &prev} }
	cases := []struct {
		name    string
		log     []logged
		expire  bool // the log expires after it was written
		cursor  agent.Position
		head    session.SessionHead
		want    bool
		reason  session.ReplayReason
		skip    agent.Position
		replays int
	}{
		{name: "at top, stream expired", log: seqs(1, 1, 160), expire: true, cursor: p(1, 160), head: head(p(1, 160)),
			want: true, skip: p(1, 160)},
		{name: "at top, stream expired, after a takeover raised the epoch", log: seqs(1, 1, 160), expire: true, cursor: p(1, 160), head: head(p(2, 160)),
			want: true, skip: p(1, 160)},
		{name: "behind the top, stream expired", log: seqs(1, 1, 160), expire: true, cursor: p(1, 150), head: head(p(1, 160)),
			reason: session.ReplayTruncated, skip: p(1, 150)},
		{name: "stream expired, head unreadable", log: seqs(1, 1, 160), expire: true, cursor: p(1, 160), head: unreadable,
			reason: session.ReplayUnavailable},
		{name: "from nothing, stream expired", log: seqs(1, 1, 160), expire: true, cursor: p(0, 0), head: head(p(1, 160)),
			reason: session.ReplayTruncated},
		{name: "inside the log", log: seqs(1, 1, 20), cursor: p(1, 12), head: head(p(1, 20)),
			want: true, skip: p(1, 20), replays: 8},
		{name: "at the log's top", log: seqs(1, 1, 20), cursor: p(1, 20), head: head(p(1, 20)),
			want: true, skip: p(1, 20)},
		{name: "before the log (trimmed)", log: seqs(1, 1, 60), cursor: p(1, 5), head: head(p(1, 60)),
			reason: session.ReplayTruncated, skip: p(1, 60), replays: 50},
		{name: "before a log created afresh by a new epoch", log: []logged{withPrev(p(2, 4), p(1, 3))}, cursor: p(1, 1), head: head(p(2, 4)),
			reason: session.ReplayTruncated, skip: p(2, 4), replays: 1},
		{name: "at the end of the epoch before a log created afresh", log: []logged{withPrev(p(2, 4), p(1, 3))}, cursor: p(1, 3), head: head(p(2, 4)),
			want: true, skip: p(2, 4), replays: 1},
		{name: "ahead of a log that reaches back", log: seqs(1, 1, 20), cursor: p(1, 30), head: head(p(1, 20)),
			reason: session.ReplayTruncated},
		{name: "ahead of the log, the session at the cursor (appends lost at the tail)", log: seqs(1, 1, 20), cursor: p(1, 25), head: head(p(1, 25)),
			want: true, skip: p(1, 25)},
		{name: "ahead, no log", cursor: p(3, 30), head: head(p(0, 0)),
			reason: session.ReplayTruncated},
		{name: "ahead of another epoch", log: seqs(1, 1, 5), cursor: p(4, 5), head: head(p(1, 5)),
			reason: session.ReplayTruncated},
		{name: "empty session", cursor: p(0, 0), head: head(p(0, 0)),
			want: true},
		{name: "empty session, head unreadable", cursor: p(0, 0), head: unreadable,
			reason: session.ReplayUnavailable},
		{name: "after a takeover, across the seam", log: append(seqs(1, 1, 10), withPrev(p(2, 11), p(1, 10)), logged{at: p(2, 12)}), cursor: p(1, 8), head: head(p(2, 12)),
			want: true, skip: p(2, 12), replays: 4},
		{name: "after a takeover, seq stepped back", log: append(seqs(1, 1, 10), withPrev(p(2, 9), p(1, 10))), cursor: p(1, 10), head: head(p(2, 9)),
			want: true, skip: p(2, 9), replays: 1},
		{name: "after a takeover, old tail lost", log: append(seqs(1, 1, 8), withPrev(p(2, 11), p(1, 10))), cursor: p(1, 8), head: head(p(2, 11)),
			reason: session.ReplayTruncated, skip: p(2, 11), replays: 1},
		{name: "after a takeover, no event of the new epoch yet", log: seqs(1, 1, 10), cursor: p(1, 10), head: head(p(2, 10)),
			want: true, skip: p(1, 10)},
	}
	for name, rl := range recoveredLogs(t, 50) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			// Cases whose log expires first (the memory clock expires
			// every session at once), then the others.
			for _, expiring := range []bool{true, false} {
				for i, c := range cases {
					if c.expire != expiring {
						continue
					}
					id := "case" + string(rune('a'+i))
					for _, l := range c.log {
						ev := redisEvent(id, l.at.Epoch, l.at.Seq)
						ev.Prev = l.prev
						if err := rl.log.Append(ctx, ev); err != nil {
							t.Fatal(err)
						}
					}
				}
				if expiring {
					for i, c := range cases {
						if c.expire {
							rl.expire(t, "case"+string(rune('a'+i)))
						}
					}
				}
			}
			for i, c := range cases {
				id := "case" + string(rune('a'+i))
				rr, err := session.Replay(ctx, rl.log, id, c.cursor, 0, c.head)
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				if rr.Recovered != c.want || rr.Reason != c.reason || rr.Skip != c.skip || len(rr.Events) != c.replays {
					t.Errorf("%s: recovered %v %q skip %v replayed %d; want %v %q skip %v replayed %d",
						c.name, rr.Recovered, rr.Reason, rr.Skip, len(rr.Events), c.want, c.reason, c.skip, c.replays)
				}
			}
		})
	}
}
