package session_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/redisstore"
)

// TestReplayLogsAgree drives the memory and the Redis replay logs with the
// same random appends, reads and passing of time, and requires identical
// answers: same fence verdicts, same events, same completeness.
func TestReplayLogsAgree(t *testing.T) {
	client, prefix := testenv.Redis(t)
	ctx := context.Background()
	const ttl = time.Minute
	var runs atomic.Int64

	rapid.Check(t, func(rt *rapid.T) {
		runPrefix := fmt.Sprintf("%srun%d:", prefix, runs.Add(1))
		maxLen := rapid.IntRange(1, 6).Draw(rt, "maxLen")
		clock := session.NewManualClock(time.Unix(1000, 0))
		mem := session.NewMemoryReplayLog(maxLen, ttl, session.WithMemoryClock(clock.Now))
		red := redisstore.NewReplayLog(client, redisstore.ReplayConfig{Prefix: runPrefix, MaxLen: int64(maxLen), TTL: ttl})
		sessionGen := rapid.SampledFrom([]string{"a", "b"})
		posGen := rapid.Custom(func(rt *rapid.T) agent.Position {
			return agent.Position{Epoch: int64(rapid.IntRange(0, 3).Draw(rt, "epoch")), Seq: int64(rapid.IntRange(0, 12).Draw(rt, "seq"))}
		})

		rt.Repeat(map[string]func(*rapid.T){
			"append": func(rt *rapid.T) {
				p := posGen.Draw(rt, "pos")
				ev := agent.Event{Session: sessionGen.Draw(rt, "session"), Epoch: p.Epoch, Seq: p.Seq,
					Type: agent.TypeDelta, Data: fmt.Appendf(nil, `{"at":%q}`, p), At: time.Unix(1700000000, 0).UTC()}
				errMem, errRed := mem.Append(ctx, ev), red.Append(ctx, ev)
				if (errMem == nil) != (errRed == nil) || errors.Is(errMem, session.ErrFenced) != errors.Is(errRed, session.ErrFenced) {
					rt.Fatalf("append %v: memory %v, redis %v", p, errMem, errRed)
				}
			},
			"since": func(rt *rapid.T) {
				id, after, limit := sessionGen.Draw(rt, "session"), posGen.Draw(rt, "after"), rapid.IntRange(0, 4).Draw(rt, "limit")
				evMem, cMem, err := mem.Since(ctx, id, after, limit)
				if err != nil {
					rt.Fatal(err)
				}
				evRed, cRed, err := red.Since(ctx, id, after, limit)
				if err != nil {
					rt.Fatal(err)
				}
				if cMem != cRed || fmt.Sprint(positions(evMem)) != fmt.Sprint(positions(evRed)) {
					rt.Fatalf("since %s %v limit %d: memory %v complete %v, redis %v complete %v",
						id, after, limit, positions(evMem), cMem, positions(evRed), cRed)
				}
			},
			"time passes": func(rt *rapid.T) {
				d := time.Duration(rapid.IntRange(1, 70).Draw(rt, "seconds")) * time.Second
				clock.Advance(d)
				testenv.ShiftRedisTTLs(rt, client, runPrefix, d)
			},
		})
	})
}

func positions(evs []agent.Event) []agent.Position {
	out := make([]agent.Position, len(evs))
	for i, ev := range evs {
		out[i] = ev.Pos()
	}
	return out
}
