package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/gateway"
)

// gateway drain against a real (embedded-mode) node: a wrong token is
// refused and starts nothing; the admin token starts the drain, and --wait
// returns once the node is empty.
func TestDrainCommandDrainsANode(t *testing.T) {
	cfg := gateway.DefaultConfig()
	cfg.JWTSecret, cfg.AdminToken, cfg.NodeName = "secret", "admin-tok", "drain-test"
	cfg.DrainWindow = 30 * time.Second
	node, err := gateway.New(context.Background(), cfg, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	srv := httptest.NewServer(node.Handler())
	t.Cleanup(srv.Close)

	var out bytes.Buffer
	bad := drainCmd{URL: srv.URL, AdminToken: "wrong", Wait: true, Timeout: 30 * time.Second}
	if err := bad.Run(&out); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong token: %v", err)
	}
	if node.Draining() {
		t.Fatal("a refused drain started draining")
	}
	good := drainCmd{URL: srv.URL + "/", AdminToken: "admin-tok", Wait: true, Timeout: 60 * time.Second}
	if err := good.Run(&out); err != nil {
		t.Fatal(err)
	}
	if !node.Draining() || !strings.Contains(out.String(), "drained") {
		t.Fatalf("draining %v, output %q", node.Draining(), out.String())
	}
}
