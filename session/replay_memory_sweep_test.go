package session

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
)

// Logs of sessions that are never read again are dropped by the sweep that
// appends run once per TTL, so memory stays bounded by the live sessions.
func TestMemoryReplayLogSweepsExpiredSessions(t *testing.T) {
	clock := NewManualClock(time.Unix(1000, 0))
	l := NewMemoryReplayLog(10, time.Minute, WithMemoryClock(clock.Now))
	ctx := context.Background()
	for i := range 50 {
		ev := agent.Event{Session: fmt.Sprintf("s%d", i), Epoch: 1, Seq: 1, Type: agent.TypeDelta, Data: []byte(`{}`)}
		if err := l.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Minute)
	if err := l.Append(ctx, agent.Event{Session: "fresh", Epoch: 1, Seq: 1, Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	n := len(l.logs)
	l.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d session logs kept after all but one expired, want 1", n)
	}
}
