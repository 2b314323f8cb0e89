package session_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/pgstore"
)

// BenchmarkPostgresSession2000Turns drives one session through 2,000 turns
// on the Postgres session store, as an actor does: per turn one fenced
// inbox write (Accept), one fenced attempt count (StartTurn) and one fenced
// turn-end write (CompleteTurn) of a 1 KiB question and a 1 KiB answer. It
// reports the median turn-end write of the first and of the last 100 turns
// (their ratio shows whether the cost grows with the conversation) and the
// p50 and p99 of the inbox write and of the attempt count.
// Run: go test -run '^$' -bench Session2000Turns -benchtime 1x ./session/
func BenchmarkPostgresSession2000Turns(b *testing.B) {
	store := pgstore.NewSessionStore(testenv.Postgres(b))
	ctx := context.Background()
	const turns, edge = 2000, 100
	question, answer := strings.Repeat("q", 1024), strings.Repeat("a", 1024)
	data, _ := json.Marshal(map[string]string{"text": question})
	var ends, accepts, starts []time.Duration
	for i := 0; b.Loop(); i++ {
		key := fmt.Sprint("bench-", i)
		if _, err := store.Thaw(ctx, key, 1, session.ThawQuery{}); err != nil {
			b.Fatal(err)
		}
		ends, accepts, starts = make([]time.Duration, 0, turns), make([]time.Duration, 0, turns), make([]time.Duration, 0, turns)
		seq := int64(0)
		for turn := range turns {
			in := agent.Input{Type: "message", Data: data, IdempotencyKey: fmt.Sprint("k", turn)}
			seq++
			e := session.InboxEntry{Epoch: 1, Seq: seq, Input: in, BodyHash: session.InputHash(in)}
			start := time.Now()
			if err := store.Accept(ctx, key, 1, e, 24*time.Hour); err != nil {
				b.Fatal(err)
			}
			accepts = append(accepts, time.Since(start))
			start = time.Now()
			if err := store.StartTurn(ctx, key, 1, e.Pos(), 1); err != nil {
				b.Fatal(err)
			}
			starts = append(starts, time.Since(start))
			seq += 4 // turn_started, a delta, message, turn_completed
			rec := session.TurnRecord{Input: e.Pos(), Seq: seq, Messages: []agent.Message{{Role: "user", Content: question}, {Role: "assistant", Content: answer}}}
			start = time.Now()
			if err := store.CompleteTurn(ctx, key, 1, rec); err != nil {
				b.Fatal(err)
			}
			ends = append(ends, time.Since(start))
		}
	}
	median := func(ds []time.Duration) float64 {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds())
	}
	first, last := median(ends[:edge]), median(ends[turns-edge:])
	slices.Sort(accepts)
	slices.Sort(starts)
	b.ReportMetric(first, "first100-turn-end-p50-µs")
	b.ReportMetric(last, "last100-turn-end-p50-µs")
	b.ReportMetric(last/first, "last/first")
	b.ReportMetric(float64(accepts[len(accepts)/2].Microseconds()), "accept-p50-µs")
	b.ReportMetric(float64(accepts[len(accepts)*99/100].Microseconds()), "accept-p99-µs")
	b.ReportMetric(float64(starts[len(starts)/2].Microseconds()), "startturn-p50-µs")
	b.ReportMetric(float64(starts[len(starts)*99/100].Microseconds()), "startturn-p99-µs")
}
