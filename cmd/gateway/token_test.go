package main

import (
	"bytes"
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/gateway"
	"github.com/relaygw/relay/internal/testkit/proctest"
)

// A minted token verifies with the same secret, carries the sub and
// sessions given, expires after the TTL, and fails with another secret.
func TestTokenMintsAVerifiableJWT(t *testing.T) {
	cmd := tokenCmd{JWTSecret: "s3cret", Sub: "user-1", Sessions: []string{"s1", " demo-*"}, TTL: 2 * time.Hour}
	var out bytes.Buffer
	if err := cmd.Run(&out); err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSuffix(out.String(), "\n")
	if strings.Contains(tok, "\n") || tok == "" {
		t.Fatalf("output %q: want one token and a newline", out.String())
	}
	c, err := gateway.NewAuthenticator("s3cret", nil, "").ParseToken(tok)
	if err != nil {
		t.Fatal(err)
	}
	if c.Subject != "user-1" || !slices.Equal(c.Sessions, []string{"s1", "demo-*"}) {
		t.Fatalf("claims sub %q sessions %q", c.Subject, c.Sessions)
	}
	if !c.Allows("demo-7") || c.Allows("other") {
		t.Fatalf("claims allow the wrong sessions: %q", c.Sessions)
	}
	if ttl := c.ExpiresAt.Sub(c.IssuedAt.Time); ttl != 2*time.Hour {
		t.Fatalf("exp - iat = %v, want 2h", ttl)
	}
	if _, err := gateway.NewAuthenticator("other", nil, "").ParseToken(tok); err == nil {
		t.Fatal("the token verified with another secret")
	}
}

// Bad inputs are refused with an error naming the setting, and print nothing.
func TestTokenRefusesBadInput(t *testing.T) {
	good := tokenCmd{JWTSecret: "s", Sub: "u", Sessions: []string{"*"}, TTL: time.Hour}
	cases := []struct {
		name string
		mut  func(*tokenCmd)
		want string
	}{
		{"no secret", func(c *tokenCmd) { c.JWTSecret = "" }, "JWT_SECRET"},
		{"blank sub", func(c *tokenCmd) { c.Sub = "  " }, "--sub"},
		{"no sessions", func(c *tokenCmd) { c.Sessions = nil }, "--sessions"},
		{"empty session", func(c *tokenCmd) { c.Sessions = []string{"a", ""} }, "--sessions"},
		{"zero ttl", func(c *tokenCmd) { c.TTL = 0 }, "--ttl"},
		{"negative ttl", func(c *tokenCmd) { c.TTL = -time.Minute }, "--ttl"},
		{"ttl over a year", func(c *tokenCmd) { c.TTL = maxTokenTTL + time.Hour }, "--ttl"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mut(&c)
			var out bytes.Buffer
			err := c.Run(&out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %s", err, tc.want)
			}
			if out.Len() != 0 {
				t.Fatalf("printed %q on a refusal", out.String())
			}
		})
	}
}

func TestSecretPrintsRandomHex(t *testing.T) {
	var a, b bytes.Buffer
	if err := (&secretCmd{Bytes: 16}).Run(&a); err != nil {
		t.Fatal(err)
	}
	if err := (&secretCmd{Bytes: 16}).Run(&b); err != nil {
		t.Fatal(err)
	}
	if len(a.String()) != 33 || a.String() == b.String() {
		t.Fatalf("secrets %q %q: want two different 32-digit lines", a.String(), b.String())
	}
	if err := (&secretCmd{Bytes: 8}).Run(&a); err == nil {
		t.Fatal("8 bytes accepted")
	}
}

// The real binary, built with the release linker flags: --version prints
// them and the Go version; `token` reads JWT_SECRET from the environment and
// its token verifies; `token` without a secret exits non-zero.
func TestBinaryVersionAndToken(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway binary")
	}
	bin := filepath.Join(t.TempDir(), "gateway")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := proctest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ld := "-X github.com/relaygw/relay/internal/buildinfo.Version=v0.0.0-test -X github.com/relaygw/relay/internal/buildinfo.Commit=0123abc"
	build := exec.CommandContext(ctx, "go", "build", "-ldflags", ld, "-o", bin, "./cmd/gateway")
	build.Dir = root
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out); !strings.HasPrefix(got, "relay v0.0.0-test (commit 0123abc") || !strings.Contains(got, "go1.") {
		t.Fatalf("--version printed %q", got)
	}
	tc := exec.CommandContext(ctx, bin, "token", "--sub", "ops", "--sessions", "*", "--ttl", "10m")
	tc.Env = []string{"JWT_SECRET=from-env"}
	out, err = tc.Output()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gateway.NewAuthenticator("from-env", nil, "").ParseToken(strings.TrimSpace(string(out))); err != nil {
		t.Fatalf("the binary's token does not verify: %v", err)
	}
	tc = exec.CommandContext(ctx, bin, "token", "--sub", "ops", "--sessions", "*")
	tc.Env = []string{"JWT_SECRET="}
	if out, err := tc.CombinedOutput(); err == nil {
		t.Fatalf("token without a secret succeeded: %s", out)
	}

	// Development mode at LOG_LEVEL=error: the tokens still reach stderr,
	// and the printed API token is accepted by the node.
	addr, err := proctest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p := proctest.NewProc("dev", addr, bin, []string{"ADDR=" + addr, "NODE_NAME=dev", "LOG_LEVEL=error",
		"JWT_SECRET=", "ADMIN_TOKEN=", "NATS_URL=", "DATABASE_URL=", "REDIS_URL="})
	t.Cleanup(p.Stop)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := p.Logs().WaitFor(ctx, 0, proctest.Contains("api token:"))
	if err != nil {
		t.Fatalf("no api token printed at LOG_LEVEL=error: %v\n%v", err, p.Logs().Lines())
	}
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(line[strings.Index(line, "api token:")+len("api token:"):])
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+"/api/sessions/demo-1", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/sessions/demo-1 with the printed token: %d", resp.StatusCode)
	}
}
