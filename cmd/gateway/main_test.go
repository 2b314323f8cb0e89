package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/proctest"
)

// TestRefusesConfigsThatBreakGuarantees runs the real binary with each
// refused configuration: it exits non-zero before listening, and its
// stderr names the settings at fault.
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
	}{
		{"nats without postgres", []string{"NATS_URL=nats://127.0.0.1:4222", "DATABASE_URL=", "REDIS_URL=redis://127.0.0.1:6379/0"},
			"gateway: NATS_URL (cluster mode) needs DATABASE_URL (without it each node decides ownership on its own in-memory leases, so two nodes can own one session)"},
		{"socket queue below replay limit", []string{"NATS_URL=", "DATABASE_URL=", "REDIS_URL=", "SOCKET_QUEUE=256", "REPLAY_MAX_LEN=1000"},
			"gateway: SOCKET_QUEUE (256) is below REPLAY_MAX_LEN (1000)"},
		{"openai agent without its server", []string{"NATS_URL=", "DATABASE_URL=", "REDIS_URL=", "AGENT=openai", "OPENAI_BASE_URL=", "OPENAI_MODEL="},
			"gateway: AGENT=openai needs OPENAI_BASE_URL (the API root, /v1 included, e.g. http://127.0.0.1:8000/v1) and OPENAI_MODEL"},
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
			if st.ExitCode() == 0 {
				t.Fatalf("exit code 0, want non-zero\n%v", p.Logs().Lines())
			}
			// The process has exited, so its output is all in.
			if p.Logs().Count(0, proctest.Contains(tc.want)) == 0 {
				t.Fatalf("stderr lacks %q:\n%v", tc.want, p.Logs().Lines())
			}
			if n := p.Logs().Count(0, proctest.Msg("listening")); n != 0 {
				t.Fatalf("the node listened before refusing:\n%v", p.Logs().Lines())
			}
		})
	}
}
