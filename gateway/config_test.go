package gateway

import (
	"strings"
	"testing"
)

// TestConfigValidateStoreCombinations: the three documented modes are
// accepted; NATS (cluster mode) without durable leases or without the shared
// replay log is refused with a message naming what is missing.
func TestConfigValidateStoreCombinations(t *testing.T) {
	const pg, redis, nats = "postgres://db/test", "redis://r:6379/0", "nats://n:4222"
	cases := []struct {
		name            string
		db, red, nat    string
		wantErrContains []string // nil: valid
	}{
		{name: "embedded default"},
		{name: "durable single node, postgres", db: pg},
		{name: "durable single node, redis", red: redis},
		{name: "durable single node, both", db: pg, red: redis},
		{name: "cluster", db: pg, red: redis, nat: nats},
		{name: "nats alone", nat: nats, wantErrContains: []string{"NATS_URL", "DATABASE_URL", "two nodes can own one session", "REDIS_URL"}},
		{name: "nats without postgres", red: redis, nat: nats, wantErrContains: []string{"NATS_URL", "DATABASE_URL", "two nodes can own one session"}},
		{name: "nats without redis", db: pg, nat: nats, wantErrContains: []string{"NATS_URL", "REDIS_URL", "in-memory log"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.DatabaseURL, c.RedisURL, c.NATSURL = tc.db, tc.red, tc.nat
			err := c.Validate()
			if tc.wantErrContains == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want valid", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate() = nil, want a refusal")
			}
			for _, s := range tc.wantErrContains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if tc.db != "" && strings.Contains(err.Error(), "DATABASE_URL") {
				t.Errorf("error %q names DATABASE_URL, which is set", err)
			}
			if tc.red != "" && strings.Contains(err.Error(), "REDIS_URL") {
				t.Errorf("error %q names REDIS_URL, which is set", err)
			}
		})
	}
}

// TestConfigValidateSocketQueueCoversReplay: SOCKET_QUEUE below
// REPLAY_MAX_LEN is refused; equal or above is accepted.
func TestConfigValidateSocketQueueCoversReplay(t *testing.T) {
	for _, tc := range []struct {
		queue int
		max   int64
		ok    bool
	}{
		{256, 1000, false},
		{999, 1000, false},
		{1000, 1000, true},
		{1024, 1000, true},
		{1, 1, true},
	} {
		c := DefaultConfig()
		c.SocketQueue, c.ReplayMaxLen = tc.queue, tc.max
		err := c.Validate()
		if tc.ok != (err == nil) {
			t.Fatalf("SOCKET_QUEUE=%d REPLAY_MAX_LEN=%d: Validate() = %v, want ok=%v", tc.queue, tc.max, err, tc.ok)
		}
		if err != nil && (!strings.Contains(err.Error(), "SOCKET_QUEUE") || !strings.Contains(err.Error(), "REPLAY_MAX_LEN")) {
			t.Fatalf("error %q does not name both settings", err)
		}
	}
}
