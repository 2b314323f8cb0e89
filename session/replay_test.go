package session_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/redisstore"
)

// replayLogs returns a memory and a Redis replay log, each keeping maxLen
// events per session.
func replayLogs(t *testing.T, maxLen int) map[string]session.ReplayLog {
	t.Helper()
	client, prefix := testenv.Redis(t)
	return map[string]session.ReplayLog{
		"memory": session.NewMemoryReplayLog(maxLen, time.Minute),
		"redis":  redisstore.NewReplayLog(client, redisstore.ReplayConfig{Prefix: prefix, MaxLen: int64(maxLen), TTL: time.Minute}),
	}
}

func appendSeqs(t *testing.T, log session.ReplayLog, id string, epoch int64, seqs ...int64) {
	t.Helper()
	for _, s := range seqs {
		if err := log.Append(context.Background(), redisEvent(id, epoch, s)); err != nil {
			t.Fatal(err)
		}
	}
}

func seqsOf(evs []agent.Event) []int64 {
	out := make([]int64, 0, len(evs))
	for _, ev := range evs {
		out = append(out, ev.Seq)
	}
	return out
}

// An epoch's first event carries Prev, where the previous epoch ended: a
// log that holds the previous epoch up to Prev recovers across the seam
// even when the new epoch's seq steps back or jumps; one that misses the
// previous epoch's tail (the events up to Prev) is replay_truncated.
func TestReplayPrevMarksMissedTail(t *testing.T) {
	p := func(e, s int64) agent.Position { return agent.Position{Epoch: e, Seq: s} }
	for name, log := range replayLogs(t, 100) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			withPrev := func(id string, at, prev agent.Position) {
				ev := redisEvent(id, at.Epoch, at.Seq)
				ev.Prev = &prev
				if err := log.Append(ctx, ev); err != nil {
					t.Fatal(err)
				}
			}
			appendSeqs(t, log, "back", 1, 1, 2, 3, 4, 5)
			withPrev("back", p(2, 4), p(1, 5)) // the new epoch continues from the stored seq 3
			appendSeqs(t, log, "jump", 1, 1, 2, 3)
			withPrev("jump", p(2, 6), p(1, 3))     // seqs 4, 5 were reserved, never emitted
			appendSeqs(t, log, "tail", 1, 1, 2, 3) // 1-4 and 1-5 were lost
			withPrev("tail", p(2, 4), p(1, 5))
			for _, c := range []struct {
				id   string
				from agent.Position
				ok   bool
			}{
				{"back", p(0, 0), true}, {"back", p(1, 2), true}, {"back", p(1, 5), true},
				{"jump", p(0, 0), true}, {"jump", p(1, 3), true},
				{"tail", p(0, 0), false}, {"tail", p(1, 2), false},
			} {
				rr, err := session.Replay(ctx, log, c.id, c.from, 0, nil)
				if err != nil || rr.Recovered != c.ok {
					t.Errorf("%s from %v: recovered %v (%s), %v; want %v", c.id, c.from, rr.Recovered, rr.Reason, err, c.ok)
				}
			}
		})
	}
}

// TestReplaySeam: the replay seam's rules on both replay logs. A cursor
// inside the log replays what follows and skips live copies up to the last
// replayed event; a trimmed log or a seq jump is replay_truncated with the
// same skip; a cursor ahead of a log that does not reach back to it is
// replay_truncated and skips no live event (the live stream has not passed
// it).
func TestReplaySeam(t *testing.T) {
	p := func(e, s int64) agent.Position { return agent.Position{Epoch: e, Seq: s} }
	for name, log := range replayLogs(t, 4) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			appendSeqs(t, log, "whole", 1, 1, 2, 3)
			appendSeqs(t, log, "whole", 2, 4) // a takeover: epoch 2 continues the seq
			appendSeqs(t, log, "trimmed", 1, 1, 2, 3, 4, 5, 6)
			appendSeqs(t, log, "jump", 1, 1, 2, 5)
			for _, c := range []struct {
				id        string
				cursor    agent.Position
				seqs      []int64
				top       agent.Position
				recovered bool
				skip      agent.Position
			}{
				{"whole", p(1, 1), []int64{2, 3, 4}, p(2, 4), true, p(2, 4)},
				{"whole", p(2, 4), []int64{}, p(2, 4), true, p(2, 4)},
				{"whole", agent.Position{}, []int64{1, 2, 3, 4}, p(2, 4), true, p(2, 4)},
				{"trimmed", p(1, 1), []int64{3, 4, 5, 6}, p(1, 6), false, p(1, 6)},
				{"jump", p(1, 2), []int64{5}, p(1, 5), false, p(1, 5)},
				{"never-written", p(1, 7), []int64{}, p(1, 7), false, agent.Position{}},
			} {
				res, err := session.Replay(ctx, log, c.id, c.cursor, 0, nil)
				if err != nil {
					t.Fatalf("%s after %v: %v", c.id, c.cursor, err)
				}
				wantReason := session.ReplayReason("")
				if !c.recovered {
					wantReason = session.ReplayTruncated
				}
				if got := seqsOf(res.Events); !slices.Equal(got, c.seqs) || res.Top != c.top || res.Recovered != c.recovered || res.Reason != wantReason || res.Skip != c.skip {
					t.Errorf("%s after %v = seqs %v top %v recovered %v %q skip %v, want %v %v %v %q %v",
						c.id, c.cursor, got, res.Top, res.Recovered, res.Reason, res.Skip, c.seqs, c.top, c.recovered, wantReason, c.skip)
				}
			}
		})
	}
}

// TestReplayDuplicate: Duplicate drops live events at or before the seam
// and keeps later ones, across epochs; a zero Skip keeps all.
func TestReplayDuplicate(t *testing.T) {
	res := session.ReplayResult{Skip: agent.Position{Epoch: 2, Seq: 4}}
	for pos, want := range map[agent.Position]bool{
		{Epoch: 1, Seq: 9}: true, {Epoch: 2, Seq: 3}: true, {Epoch: 2, Seq: 4}: true,
		{Epoch: 2, Seq: 5}: false, {Epoch: 3, Seq: 1}: false,
	} {
		if got := res.Duplicate(pos); got != want {
			t.Errorf("Duplicate(%v) with skip %v = %v, want %v", pos, res.Skip, got, want)
		}
	}
	if (session.ReplayResult{}).Duplicate(agent.Position{Epoch: 1, Seq: 1}) {
		t.Error("a zero skip dropped the first event")
	}
}

// TestReplayLimit: a limit shorter than what follows the cursor replays the
// oldest events and skips up to the last of them only.
func TestReplayLimit(t *testing.T) {
	for name, log := range replayLogs(t, 10) {
		t.Run(name, func(t *testing.T) {
			appendSeqs(t, log, "s", 1, 1, 2, 3, 4, 5)
			res, err := session.Replay(context.Background(), log, "s", agent.Position{Epoch: 1, Seq: 1}, 2, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := seqsOf(res.Events); !slices.Equal(got, []int64{2, 3}) || res.Skip != (agent.Position{Epoch: 1, Seq: 3}) || !res.Recovered {
				t.Fatalf("limit 2 = %v skip %v recovered %v", got, res.Skip, res.Recovered)
			}
		})
	}
}

// TestReplayUnavailable: a Redis log cut off answers replay_unavailable with
// the error, and skips live events up to the cursor.
func TestReplayUnavailable(t *testing.T) {
	client, prefix := testenv.Redis(t)
	addr, err := testenv.HostPort(testenv.RedisServerURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.Proxy(t, addr)
	proxied := redis.NewClient(&redis.Options{Addr: proxy.Addr(), DB: client.(*redis.Client).Options().DB, MaxRetries: -1})
	t.Cleanup(func() { _ = proxied.Close() })
	log := redisstore.NewReplayLog(proxied, redisstore.ReplayConfig{Prefix: prefix, TTL: time.Minute})
	appendSeqs(t, log, "s", 1, 1, 2)

	proxy.Cut()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cursor := agent.Position{Epoch: 1, Seq: 1}
	res, err := session.Replay(ctx, log, "s", cursor, 0, nil)
	if err == nil || errors.Is(err, session.ErrFenced) {
		t.Fatalf("replay while cut off: err %v", err)
	}
	if res.Recovered || res.Reason != session.ReplayUnavailable || len(res.Events) != 0 || res.Top != cursor || res.Skip != cursor {
		t.Fatalf("replay while cut off = %+v", res)
	}
}

// redisEvent is a delta event of session id at epoch-seq.
func redisEvent(id string, epoch, seq int64) agent.Event {
	return agent.Event{Session: id, Epoch: epoch, Seq: seq, Type: agent.TypeDelta,
		Data: []byte(`{"text":"x"}`), At: time.Unix(1700000000, 0).UTC()}
}
