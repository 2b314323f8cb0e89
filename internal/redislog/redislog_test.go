package redislog

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestSampled: a burst of go-redis lines (an outage) yields one warn entry
// per sampling window, not one per line, with the line as its detail.
func TestSampled(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := sampled(zap.New(core), time.Hour) // one window for the whole burst
	for i := 0; i < 100; i++ {
		l.Printf(context.Background(), "failed to dial %d", i)
	}
	all := logs.All()
	if len(all) != 1 {
		t.Fatalf("%d entries for a burst of 100 lines, want 1", len(all))
	}
	if e := all[0]; e.Level != zapcore.WarnLevel || e.Message != Message || e.ContextMap()["detail"] != "failed to dial 0" {
		t.Fatalf("entry %+v, want a warn %q with the first line as detail", e, Message)
	}
}
