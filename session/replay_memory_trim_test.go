package session_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/session"
)

// TestMemoryReplayLogKeepsExactlyMaxLen appends one event at a time past
// several trims and checks after each append that Since and Top see exactly
// the newest maxLen events and the floor right below them, whatever the log
// holds internally between trims.
func TestMemoryReplayLogKeepsExactlyMaxLen(t *testing.T) {
	ctx := context.Background()
	for _, maxLen := range []int{1, 2, 4, 7, 16} {
		t.Run(fmt.Sprint(maxLen), func(t *testing.T) {
			l := session.NewMemoryReplayLog(maxLen, 0)
			for i := int64(1); i <= int64(5*maxLen+3); i++ {
				if err := l.Append(ctx, agent.Event{Session: "s", Epoch: 1, Seq: i, Type: "delta", Data: []byte(`{}`)}); err != nil {
					t.Fatal(err)
				}
				first := max(1, i-int64(maxLen)+1)
				evs, complete, err := l.Since(ctx, "s", agent.Position{}, 0)
				if err != nil {
					t.Fatal(err)
				}
				if int64(len(evs)) != i-first+1 || evs[0].Seq != first || evs[len(evs)-1].Seq != i {
					t.Fatalf("after %d appends: Since(0) = %d events %v..%v, want %d..%d", i, len(evs), evs[0].Seq, evs[len(evs)-1].Seq, first, i)
				}
				if complete != (first == 1) {
					t.Fatalf("after %d appends: Since(0) complete = %v, want %v", i, complete, first == 1)
				}
				// Reaching back exactly to the floor is complete; one below is not.
				floor := agent.Position{Epoch: 1, Seq: first - 1}
				if first > 1 {
					evs, complete, _ = l.Since(ctx, "s", floor, 0)
					if !complete || int64(len(evs)) != i-first+1 {
						t.Fatalf("after %d appends: Since(%v) = %d events, complete %v; want %d, true", i, floor, len(evs), complete, i-first+1)
					}
					below := agent.Position{Epoch: 1, Seq: first - 2}
					if _, complete, _ = l.Since(ctx, "s", below, 0); complete != below.IsZero() {
						t.Fatalf("after %d appends: Since(%v) complete = %v", i, below, complete)
					}
				}
				evs, _, _ = l.Since(ctx, "s", agent.Position{}, 1)
				if len(evs) != 1 || evs[0].Seq != first {
					t.Fatalf("after %d appends: Since(0, limit 1) = %v, want seq %d", i, evs, first)
				}
				if top, ok, _ := l.Top(ctx, "s"); !ok || top != (agent.Position{Epoch: 1, Seq: i}) {
					t.Fatalf("after %d appends: Top = %v %v", i, top, ok)
				}
			}
		})
	}
}

// BenchmarkMemoryReplayAppendFull appends to a session whose log already
// holds maxLen events, the steady state of a long session.
func BenchmarkMemoryReplayAppendFull(b *testing.B) {
	ctx := context.Background()
	for _, maxLen := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprint(maxLen), func(b *testing.B) {
			l := session.NewMemoryReplayLog(maxLen, 0)
			data := []byte(`{"text":"word "}`)
			seq := int64(0)
			for range maxLen {
				seq++
				_ = l.Append(ctx, agent.Event{Session: "s", Epoch: 1, Seq: seq, Type: "delta", Data: data})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				seq++
				if err := l.Append(ctx, agent.Event{Session: "s", Epoch: 1, Seq: seq, Type: "delta", Data: data}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
