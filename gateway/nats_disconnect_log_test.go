package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestNATSDisconnectLog: a NATS link lost while the node runs is a warning;
// the link the node closes itself at its stop is logged at debug only, so a
// clean stop ends without a warning.
func TestNATSDisconnectLog(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	n := &Node{log: zap.New(core)}
	proxy := testenv.Proxy(t, strings.TrimPrefix(testenv.NATSURL(), "nats://"))
	disconnected := make(chan struct{}, 4)
	reconnected := make(chan struct{}, 4)
	closed := make(chan struct{})
	nc, err := nats.Connect("nats://"+proxy.Addr(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(20*time.Millisecond),
		nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			n.natsDisconnected(c, err)
			disconnected <- struct{}{}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	wait := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(30 * time.Second): // a hang guard
			t.Fatalf("no %s", what)
		}
	}

	proxy.Cut()
	wait("disconnect after the cut", disconnected)
	if got := logs.FilterMessage("nats disconnected").FilterLevelExact(zapcore.WarnLevel).Len(); got != 1 {
		t.Fatalf("a lost link logged %d warnings, want 1: %v", got, logs.All())
	}
	proxy.Restore()
	wait("reconnect after the restore", reconnected)

	nc.Close()
	// The disconnect callback runs before the closed one (one callback queue).
	wait("closed callback", closed)
	if got := logs.FilterLevelExact(zapcore.WarnLevel).Len(); got != 1 {
		t.Fatalf("Close logged a warning: %v", logs.All())
	}
	if got := logs.FilterMessage("nats connection closed").FilterLevelExact(zapcore.DebugLevel).Len(); got != 1 {
		t.Fatalf("Close logged %d debug lines \"nats connection closed\", want 1: %v", got, logs.All())
	}
}
