package session

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/relaygw/relay/agent"
)

// countingPublisher counts turn ends and signals each on done.
type countingPublisher struct {
	ended atomic.Int64
	done  chan struct{} // nil: no signal
	tick  chan struct{} // nil: no signal; else a non-blocking nudge
}

func (p *countingPublisher) Publish(_ context.Context, ev agent.Event) error {
	if ev.Type == agent.TypeTurnCompleted || ev.Type == agent.TypeTurnFailed {
		p.ended.Add(1)
		if p.done != nil {
			p.done <- struct{}{}
		}
		if p.tick != nil {
			select {
			case p.tick <- struct{}{}:
			default:
			}
		}
	}
	return nil
}

// BenchmarkSubmitLocal measures Submit on the memory stores with the echo
// agent: "accept" is the time until the input is accepted (claim, mailbox,
// user_event appended and published), spread over 64 sessions; "turn" also
// waits for the turn to end (turn_started, two deltas, checkpoint, message,
// turn_completed).
func BenchmarkSubmitLocal(b *testing.B) {
	in := textInput("hello world", "")
	var tp oteltrace.TracerProvider // nil: tracing off (a no-op tracer)
	newManager := func(pub Publisher) *Manager {
		st := memoryStores()
		cfg := DefaultConfig()
		cfg.Owner, cfg.Leases, cfg.Store, cfg.Publisher = "a/1", st.leases, st.store, pub
		cfg.Log = NewMemoryReplayLog(100, 0)
		cfg.MailboxSize = 4096
		cfg.TracerProvider = tp
		return NewManager(cfg)
	}
	accept := func(b *testing.B) {
		pub := &countingPublisher{tick: make(chan struct{}, 1)}
		m := newManager(pub)
		defer m.Close()
		ids := make([]string, 64)
		for i := range ids {
			ids[i] = fmt.Sprintf("bench-%d", i)
		}
		ctx := context.Background()
		n := 0
		for b.Loop() {
			if _, err := m.Accept(ctx, ids[n%len(ids)], in); err != nil {
				b.Fatal(err)
			}
			n++
		}
		b.StopTimer()
		// Let the queued turns finish before Close (it would cancel them).
		for pub.ended.Load() < int64(n) {
			<-pub.tick
		}
	}
	b.Run("accept", accept)
	b.Run("turn", func(b *testing.B) {
		pub := &countingPublisher{done: make(chan struct{}, 1)}
		m := newManager(pub)
		defer m.Close()
		ctx := context.Background()
		n := 0
		for b.Loop() {
			if _, err := m.Accept(ctx, fmt.Sprintf("bench-%d", n%64), in); err != nil {
				b.Fatal(err)
			}
			<-pub.done
			n++
		}
	})
	// Tracing on: every span sampled and recorded by the SDK, then
	// dropped (no exporter), to show what the spans cost over "accept".
	sdk := sdktrace.NewTracerProvider()
	defer func() { _ = sdk.Shutdown(context.Background()) }()
	tp = sdk
	b.Run("accept-traced", accept)
}
