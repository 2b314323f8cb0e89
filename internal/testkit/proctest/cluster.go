package proctest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaygw/relay/gateway"
	"github.com/relaygw/relay/internal/testkit/testenv"
)

// Cluster is a set of gateway nodes of one test sharing one environment:
// the test's own Postgres schema, Redis (keys under "<cluster>:"), NATS
// (subjects under "<cluster>."), secrets, and the timings the test chose.
// Every node it started is killed when the test ends; if the test failed,
// each node's log is printed with t.Log, and a race report in any log fails
// the test.
type Cluster struct {
	t testing.TB

	// Name is the CLUSTER setting: NATS subject and Redis key prefix.
	Name       string
	Secret     string // JWT_SECRET
	APIKey     string // one of API_KEYS
	AdminToken string // ADMIN_TOKEN
	// DatabaseURL is the test schema's DSN.
	DatabaseURL string

	bin string
	env map[string]string

	mu    sync.Mutex
	procs map[string]*Proc
}

// StartTimeout bounds a node's start until /readyz answers.
const StartTimeout = 30 * time.Second

// NewCluster prepares a cluster of bin processes on the real test services
// (testenv: Postgres schema, Redis, NATS; a service that is down fails the
// test). env holds settings for every node (e.g. "LEASE_TTL": "2s") over
// these defaults: LOG_LEVEL info, ECHO_DELAY 5ms, DRAIN_WINDOW 5s, LEASE_TTL
// 2s, LEASE_RENEW 500ms, MUSTER_HEARTBEAT 200ms, MUSTER_PING 50ms,
// MUSTER_PEER_DOWN 1s, GORACE atexit_sleep_ms=0. It starts no node.
func NewCluster(t testing.TB, bin string, env map[string]string) *Cluster {
	t.Helper()
	c := &Cluster{
		t:           t,
		Name:        testenv.NATSPrefix(t),
		Secret:      randomHex(32),
		APIKey:      "key-" + randomHex(12),
		AdminToken:  "admin-" + randomHex(12),
		DatabaseURL: testenv.PostgresURL(t),
		bin:         bin,
		procs:       make(map[string]*Proc),
	}
	rc, _ := testenv.Redis(t)
	// Registered before the nodes' cleanup, so it runs after every node
	// is dead.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		keys, err := rc.Keys(ctx, c.Name+":*").Result()
		if err != nil {
			t.Errorf("proctest: list redis keys %s:*: %v", c.Name, err)
			return
		}
		if len(keys) > 0 {
			if err := rc.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("proctest: delete redis keys %s:*: %v", c.Name, err)
			}
		}
	})
	c.env = map[string]string{
		"LOG_LEVEL":        "info",
		"ECHO_DELAY":       "5ms",
		"DRAIN_WINDOW":     "5s",
		"LEASE_TTL":        "2s",
		"LEASE_RENEW":      "500ms",
		"MUSTER_HEARTBEAT": "200ms",
		"MUSTER_PING":      "50ms",
		"MUSTER_PEER_DOWN": "1s",
		// A race-enabled binary otherwise sleeps 1 s at exit.
		"GORACE": "atexit_sleep_ms=0",
	}
	for k, v := range env {
		c.env[k] = v
	}
	for k, v := range map[string]string{
		"DATABASE_URL": c.DatabaseURL,
		"REDIS_URL":    testenv.RedisServerURL(),
		"NATS_URL":     testenv.NATSURL(),
		"CLUSTER":      c.Name,
		"JWT_SECRET":   c.Secret,
		"API_KEYS":     c.APIKey,
		"ADMIN_TOKEN":  c.AdminToken,
	} {
		c.env[k] = v
	}
	t.Cleanup(c.cleanup)
	return c
}

// Env returns the value every node gets for key.
func (c *Cluster) Env(key string) string { return c.env[key] }

// Duration returns the duration setting key (e.g. "LEASE_TTL"); it fails
// the test when the value does not parse.
func (c *Cluster) Duration(key string) time.Duration {
	d, err := time.ParseDuration(c.env[key])
	if err != nil {
		c.t.Fatalf("proctest: %s=%q: %v", key, c.env[key], err)
	}
	return d
}

// Add creates node name (NODE_NAME) on a free port with the cluster's
// environment plus extra, without starting it.
func (c *Cluster) Add(name string, extra map[string]string) *Proc {
	c.t.Helper()
	addr, err := FreeAddr()
	if err != nil {
		c.t.Fatal(err)
	}
	env := map[string]string{}
	for k, v := range c.env {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	env["NODE_NAME"], env["ADDR"] = name, addr
	list := make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	p := NewProc(name, addr, c.bin, list)
	c.mu.Lock()
	c.procs[name] = p
	c.mu.Unlock()
	return p
}

// Start adds node name and starts it, waiting until it is ready. It fails
// the test (from the test goroutine only) when the node does not come up.
func (c *Cluster) Start(name string, extra map[string]string) *Proc {
	c.t.Helper()
	p := c.Add(name, extra)
	if err := c.Restart(p); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// Restart starts a new incarnation of p (which must have exited) and waits
// until it is ready. Safe to call from any goroutine.
func (c *Cluster) Restart(p *Proc) error {
	if err := p.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		return fmt.Errorf("%w\n%s", err, tail(p.Logs().Lines(), 40))
	}
	return nil
}

// Procs returns the cluster's nodes ordered by name.
func (c *Cluster) Procs() []*Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Proc, 0, len(c.procs))
	for _, p := range c.procs {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// Client returns an event API client authenticated with the cluster's API
// key.
func (c *Cluster) Client() *Client { return NewClient(c.APIKey, c.AdminToken) }

// Token mints a socket JWT for sessions (default: all).
func (c *Cluster) Token(sessions ...string) string {
	c.t.Helper()
	if len(sessions) == 0 {
		sessions = []string{"*"}
	}
	tok, err := gateway.NewAuthenticator(c.Secret, nil, "").Mint("proctest", sessions, time.Hour)
	if err != nil {
		c.t.Fatal(err)
	}
	return tok
}

func (c *Cluster) cleanup() {
	procs := c.Procs()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Stop()
		}()
	}
	wg.Wait()
	for _, p := range procs {
		if races := p.Logs().Races(); len(races) > 0 {
			c.t.Errorf("proctest: node %s reported %d data race(s)", p.name, len(races))
		}
	}
	if c.t.Failed() {
		for _, p := range procs {
			c.t.Logf("---- log of node %s (%d lines) ----\n%s", p.name, p.Logs().Len(), tail(p.Logs().Lines(), 400))
		}
	}
}

// tail returns the last n lines joined.
func tail(lines []string, n int) string {
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... %d earlier lines", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
