package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/redisstore"
	"github.com/relaygw/relay/session/storetest"
)

func TestRedisReplayLog(t *testing.T) {
	storetest.ReplayLogSuite(t, func(t *testing.T, maxLen int64, ttl time.Duration) storetest.ReplayFixture {
		client, prefix := testenv.Redis(t)
		return storetest.ReplayFixture{
			Log:     redisstore.NewReplayLog(client, redisstore.ReplayConfig{Prefix: prefix, MaxLen: maxLen, TTL: ttl}),
			Advance: func(t *testing.T, d time.Duration) { testenv.ShiftRedisTTLs(t, client, prefix, d) },
		}
	})
}

func redisEvent(id string, epoch, seq int64) agent.Event {
	return agent.Event{Session: id, Epoch: epoch, Seq: seq, Type: agent.TypeDelta,
		Data: []byte(`{"text":"x"}`), At: time.Unix(1700000000, 0).UTC()}
}

func TestRedisReplayAppendAndSince(t *testing.T) {
	client, prefix := testenv.Redis(t)
	l := redisstore.NewReplayLog(client, redisstore.ReplayConfig{Prefix: prefix, MaxLen: 100, TTL: time.Minute})
	ctx := context.Background()
	for s := int64(1); s <= 3; s++ {
		if err := l.Append(ctx, redisEvent("s1", 1, s)); err != nil {
			t.Fatal(err)
		}
	}
	// One stream per session, entry ids are the positions.
	if key := l.Key("s1"); key != prefix+"session:s1" {
		t.Fatalf("key = %q", key)
	}
	msgs, err := client.XRange(ctx, prefix+"session:s1", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 3 || msgs[0].ID != "1-1" || msgs[2].ID != "1-3" {
		t.Fatalf("stream entries = %v", msgs)
	}
	evs, complete, err := l.Since(ctx, "s1", agent.Position{Epoch: 1, Seq: 1}, 0)
	if err != nil || !complete || len(evs) != 2 || evs[0].Seq != 2 || evs[1].Seq != 3 {
		t.Fatalf("since 1-1 = %+v complete %v err %v", evs, complete, err)
	}
}

func TestRedisReplayFencedBelowTop(t *testing.T) {
	client, prefix := testenv.Redis(t)
	l := redisstore.NewReplayLog(client, redisstore.ReplayConfig{Prefix: prefix, MaxLen: 100, TTL: time.Minute})
	ctx := context.Background()
	if err := l.Append(ctx, redisEvent("s", 3, 10)); err != nil {
		t.Fatal(err)
	}
	// A stale owner of epoch 2 keeps appending: Redis refuses the lower id.
	err := l.Append(ctx, redisEvent("s", 2, 11))
	if !errors.Is(err, session.ErrFenced) {
		t.Fatalf("append below the top = %v, want ErrFenced", err)
	}
	if n, err := client.XLen(ctx, l.Key("s")).Result(); err != nil || n != 1 {
		t.Fatalf("stream length after a fenced append = %d, %v; want 1", n, err)
	}
}

func TestRedisReplayMaxLenTrims(t *testing.T) {
	client, prefix := testenv.Redis(t)
	l := redisstore.NewReplayLog(client, redisstore.ReplayConfig{Prefix: prefix, MaxLen: 4, TTL: time.Minute})
	ctx := context.Background()
	for s := int64(1); s <= 10; s++ {
		if err := l.Append(ctx, redisEvent("s", 1, s)); err != nil {
			t.Fatal(err)
		}
		if n, err := client.XLen(ctx, l.Key("s")).Result(); err != nil || n != min(s, 4) {
			t.Fatalf("after %d appends length = %d, %v; want %d", s, n, err, min(s, 4))
		}
	}
	evs, complete, err := l.Since(ctx, "s", agent.Position{}, 0)
	if err != nil || complete || len(evs) != 4 || evs[0].Seq != 7 {
		t.Fatalf("since 0 after trimming = %d events from %v, complete %v, err %v; want 7..10 incomplete", len(evs), evs[0].Pos(), complete, err)
	}
	if _, complete, _ := l.Since(ctx, "s", agent.Position{Epoch: 1, Seq: 6}, 0); !complete {
		t.Fatal("since 1-6 (the newest trimmed) should be complete")
	}
	if _, complete, _ := l.Since(ctx, "s", agent.Position{Epoch: 1, Seq: 5}, 0); complete {
		t.Fatal("since 1-5 should be incomplete: 1-6 was trimmed")
	}
}

func TestRedisReplayTTLSetAndRefreshed(t *testing.T) {
	client, prefix := testenv.Redis(t)
	const ttl = 90 * time.Second
	l := redisstore.NewReplayLog(client, redisstore.ReplayConfig{Prefix: prefix, MaxLen: 100, TTL: ttl})
	ctx := context.Background()
	if err := l.Append(ctx, redisEvent("s", 1, 1)); err != nil {
		t.Fatal(err)
	}
	pttl, err := client.PTTL(ctx, l.Key("s")).Result()
	if err != nil || pttl <= ttl-10*time.Second || pttl > ttl {
		t.Fatalf("ttl after append = %v, %v; want about %v", pttl, err, ttl)
	}
	if err := client.PExpire(ctx, l.Key("s"), 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, redisEvent("s", 1, 2)); err != nil {
		t.Fatal(err)
	}
	if pttl, err = client.PTTL(ctx, l.Key("s")).Result(); err != nil || pttl <= ttl-10*time.Second {
		t.Fatalf("ttl after second append = %v, %v; want refreshed to about %v", pttl, err, ttl)
	}
	// No TTL configured: the stream does not expire.
	forever := redisstore.NewReplayLog(client, redisstore.ReplayConfig{Prefix: prefix + "forever:"})
	if err := forever.Append(ctx, redisEvent("s", 1, 1)); err != nil {
		t.Fatal(err)
	}
	if pttl, err = client.PTTL(ctx, forever.Key("s")).Result(); err != nil || pttl != -1 { // go-redis reports "no expiry" as -1
		t.Fatalf("ttl without TTL configured = %v, %v; want none", pttl, err)
	}
}

func BenchmarkRedisAppend(b *testing.B) {
	client, prefix := testenv.Redis(b)
	l := redisstore.NewReplayLog(client, redisstore.ReplayConfig{Prefix: prefix, MaxLen: 1000, TTL: time.Hour})
	ctx := context.Background()
	ev := agent.Event{Session: "s", Epoch: 1, Type: agent.TypeDelta,
		Data: []byte(`{"text":"a short streamed delta of a reply"}`), At: time.Now().UTC()}
	b.Run("sequential", func(b *testing.B) {
		ev := ev
		ev.Session = "seq"
		for b.Loop() {
			ev.Seq++
			if err := l.Append(ctx, ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	var n atomic.Int64 // session names stay unique across the benchmark's rounds
	b.Run("parallel-sessions", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			ev := ev
			ev.Session = fmt.Sprintf("par-%d", n.Add(1))
			for pb.Next() {
				ev.Seq++
				if err := l.Append(ctx, ev); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
