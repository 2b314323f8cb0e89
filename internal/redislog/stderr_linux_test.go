package redislog

import (
	"context"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestUnreachableRedisLogsThroughZap: with the adapter installed, a real
// go-redis client whose pool dials an address nobody listens on logs the
// failed dial as a zap warn entry, and nothing reaches file descriptor 2
// (go-redis's default logger holds os.Stderr's file from its init, so the
// descriptor itself is redirected to a pipe for the test).
func TestUnreachableRedisLogsThroughZap(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	logged := make(chan struct{}, 1)
	Install(zap.New(core, zap.Hooks(func(e zapcore.Entry) error {
		if e.Message == Message {
			select {
			case logged <- struct{}{}:
			default:
			}
		}
		return nil
	})))

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup3(int(w.Fd()), 2, 0); err != nil {
		t.Fatal(err)
	}
	captured := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		captured <- string(b)
	}()
	restore := func() {
		_ = syscall.Dup3(saved, 2, 0)
		_ = syscall.Close(saved)
		_ = w.Close()
	}

	client := redis.NewClient(&redis.Options{
		Addr: "127.0.0.1:1", DialTimeout: time.Second, MaxRetries: -1,
		MinIdleConns: 1, // the pool dials in the background and logs the failure
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err == nil {
		restore()
		t.Fatal("ping of 127.0.0.1:1 succeeded")
	}
	select {
	case <-logged:
	case <-ctx.Done(): // hang guard
	}
	_ = client.Close()
	restore()
	if out := <-captured; out != "" {
		t.Fatalf("go-redis wrote to stderr directly: %q", out)
	}
	entries := logs.FilterMessage(Message).All()
	if len(entries) == 0 {
		t.Fatal("no go-redis line reached zap")
	}
	if e := entries[0]; e.Level != zapcore.WarnLevel || !strings.Contains(e.ContextMap()["detail"].(string), "dial") {
		t.Fatalf("entry %+v, want a warn with the dial failure as detail", e)
	}
}
