package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/gateway"
	"github.com/relaygw/relay/internal/testkit/proctest"
)

// TestRefusesConfigsThatBreakGuarantees runs the real binary with each
// refused configuration: it exits non-zero before listening, and its
// stderr names the settings at fault in one line with one "gateway: "
// prefix.
func TestRefusesConfigsThatBreakGuarantees(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway binary")
	}
	bin := filepath.Join(t.TempDir(), "gateway")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := proctest.Build(ctx, bin, false); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		env  []string
		want string
		code int // exit code: 80 for a refused setting, 1 for a failed start
	}{
		{"nats without postgres", []string{"NATS_URL=nats://127.0.0.1:4222", "DATABASE_URL=", "REDIS_URL=redis://127.0.0.1:6379/0"},
			"gateway: NATS_URL (cluster mode) needs DATABASE_URL (without it each node decides ownership on its own in-memory leases, so two nodes can own one session)", 80},
		{"socket queue below replay limit", []string{"NATS_URL=", "DATABASE_URL=", "REDIS_URL=", "SOCKET_QUEUE=256", "REPLAY_MAX_LEN=1000"},
			"gateway: SOCKET_QUEUE (256) is below REPLAY_MAX_LEN (1000)", 80},
		{"longpoll window not below the heartbeat timeout", []string{"NATS_URL=", "DATABASE_URL=", "REDIS_URL=", "HEARTBEAT_TIMEOUT=10s", "LONGPOLL_WINDOW=10s"},
			"gateway: LONGPOLL_WINDOW (10s) must be below HEARTBEAT_TIMEOUT (10s)", 80},
		{"database unreachable (refused at start, not by the settings)", []string{"NATS_URL=", "REDIS_URL=", "DATABASE_URL=postgres://127.0.0.1:1/relay"},
			"gateway: migrations: apply", 1},
		// pgx puts each address tried on a line of its own: folded into one.
		{"database refusing connections (one line)", []string{"NATS_URL=", "REDIS_URL=", "DATABASE_URL=postgres://postgres@127.0.0.1:1/test"},
			"dial tcp 127.0.0.1:1: connect: connection refused", 1},
		// A value that does not decode is refused with exit code 80 from
		// the environment as from a flag.
		{"heartbeat timeout not a duration", []string{"NATS_URL=", "DATABASE_URL=", "REDIS_URL=", "HEARTBEAT_TIMEOUT=abc"},
			`gateway: error: --heartbeat-timeout: expected duration but got "abc"`, 80},
		{"longpoll window not a duration", []string{"NATS_URL=", "DATABASE_URL=", "REDIS_URL=", "LONGPOLL_WINDOW=abc"},
			`gateway: error: --longpoll-window: expected duration but got "abc"`, 80},
		{"max frame bytes not a number", []string{"NATS_URL=", "DATABASE_URL=", "REDIS_URL=", "MAX_FRAME_BYTES=abc"},
			`gateway: error: --max-frame-bytes: expected a valid 64 bit int but got "abc"`, 80},
		{"unknown traces exporter", []string{"NATS_URL=", "DATABASE_URL=", "REDIS_URL=", "OTEL_TRACES_EXPORTER=zipkin"},
			`gateway: telemetry: OTEL_TRACES_EXPORTER="zipkin"`, 80},
		{"otlp over grpc", []string{"NATS_URL=", "DATABASE_URL=", "REDIS_URL=", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"},
			`gateway: telemetry: OTEL_EXPORTER_OTLP_PROTOCOL="grpc"`, 80},
		{"openai agent without its server", []string{"NATS_URL=", "DATABASE_URL=", "REDIS_URL=", "AGENT=openai", "OPENAI_BASE_URL=", "OPENAI_MODEL="},
			"gateway: AGENT=openai needs OPENAI_BASE_URL (the API root, /v1 included, e.g. http://127.0.0.1:8000/v1) and OPENAI_MODEL", 80},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr, err := proctest.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			p := proctest.NewProc("refused", addr, bin, append([]string{"ADDR=" + addr, "NODE_NAME=refused"}, tc.env...))
			t.Cleanup(p.Stop)
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st, err := p.Wait(ctx)
			if err != nil {
				t.Fatalf("the node did not exit: %v\n%v", err, p.Logs().Lines())
			}
			if st.ExitCode() != tc.code {
				t.Fatalf("exit code %d, want %d\n%v", st.ExitCode(), tc.code, p.Logs().Lines())
			}
			// The process has exited, so its output is all in.
			if p.Logs().Count(0, proctest.Contains(tc.want)) == 0 {
				t.Fatalf("stderr lacks %q:\n%v", tc.want, p.Logs().Lines())
			}
			// One prefix, as the line reads: not kong's "gateway: error:
			// serve: gateway: …", not "gateway: gateway: …".
			if n := p.Logs().Count(0, func(l string) bool { return strings.HasPrefix(l, "gateway: ") }); n != 1 ||
				p.Logs().Count(0, proctest.Contains("gateway: gateway:")) != 0 || p.Logs().Count(0, proctest.Contains("error: serve:")) != 0 {
				t.Fatalf("want one line \"gateway: <the error>\" with one prefix:\n%v", p.Logs().Lines())
			}
			// One line in all besides the JSON log lines (and proctest's
			// markers): a message with line breaks in it would leave its
			// tail unprefixed.
			if n := p.Logs().Count(0, func(l string) bool {
				return strings.TrimSpace(l) != "" && !strings.HasPrefix(l, "{") && !strings.HasPrefix(l, "--- proctest:")
			}); n != 1 {
				t.Fatalf("want the error on one line, got %d lines besides the JSON log:\n%v", n, p.Logs().Lines())
			}
			if n := p.Logs().Count(0, proctest.Msg("listening")); n != 0 {
				t.Fatalf("the node listened before refusing:\n%v", p.Logs().Lines())
			}
		})
	}
}

// TestLongPollWindowFollowsHeartbeatTimeout parses settings as the binary
// does (kong, flags and environment): LONGPOLL_WINDOW left unset follows
// HEARTBEAT_TIMEOUT (min(10s, HEARTBEAT_TIMEOUT/2)), one set explicitly is
// kept, and one set explicitly at or above HEARTBEAT_TIMEOUT is refused
// with a message naming both.
func TestLongPollWindowFollowsHeartbeatTimeout(t *testing.T) {
	for _, env := range []string{"HEARTBEAT_TIMEOUT", "LONGPOLL_WINDOW"} {
		if _, set := os.LookupEnv(env); set {
			t.Skipf("%s is set in the test's environment", env)
		}
	}
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		window  time.Duration
		refused string
	}{
		{name: "defaults", window: 10 * time.Second},
		{name: "heartbeat 10s only", args: []string{"--heartbeat-timeout=10s"}, window: 5 * time.Second},
		{name: "heartbeat 4s only, from the environment", env: map[string]string{"HEARTBEAT_TIMEOUT": "4s"}, window: 2 * time.Second},
		{name: "heartbeat 30s only", args: []string{"--heartbeat-timeout=30s"}, window: 10 * time.Second},
		{name: "both set, consistent", args: []string{"--heartbeat-timeout=10s", "--longpoll-window=8s"}, window: 8 * time.Second},
		{name: "both set, window not below", env: map[string]string{"HEARTBEAT_TIMEOUT": "10s", "LONGPOLL_WINDOW": "12s"},
			refused: "gateway: LONGPOLL_WINDOW (12s) must be below HEARTBEAT_TIMEOUT (10s)"},
		{name: "window negative", args: []string{"--longpoll-window=-1s"}, refused: "gateway: LONGPOLL_WINDOW (-1s) must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			c := cli{Serve: serveCmd{Config: gateway.DefaultConfig()}}
			_, err := newParser(&c).Parse(append([]string{"serve"}, tc.args...))
			if tc.refused != "" {
				var ce configError
				if err == nil || !errors.As(err, &ce) || !strings.HasPrefix(ce.err.Error(), tc.refused) {
					t.Fatalf("parse: %v; want a configuration error starting %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Serve.EffectiveLongPollWindow(); got != tc.window {
				t.Fatalf("LONGPOLL_WINDOW in effect %v, want %v", got, tc.window)
			}
		})
	}
}
