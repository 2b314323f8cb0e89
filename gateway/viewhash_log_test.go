package gateway

import (
	"context"
	"regexp"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestViewHashLoggedAsInAPI: the node's log lines name a Muster view hash
// in the admin API's form (16 hex digits, GET /admin/node's
// cluster.view_hash), so an operator can match a log line against the API
// and the ops page: every view_hash field logged is a string of 16 hex
// digits, and once two nodes are ready a status line carries the hash the
// API reports.
func TestViewHashLoggedAsInAPI(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel) // the status lines are logged at debug
	c := newTestCluster(t)
	c.observe = core
	c.add("a", nil)
	c.add("b", nil)
	c.waitReady()
	want := formatViewHash(c.nodes[0].scope.ViewHash())
	hex16 := regexp.MustCompile(`^[0-9a-f]{16}$`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // hang guard
	defer cancel()
	for {
		found := false
		for _, e := range logs.All() {
			v, ok := e.ContextMap()["view_hash"]
			if !ok {
				continue
			}
			s, isString := v.(string)
			if !isString || !hex16.MatchString(s) {
				t.Fatalf("log line %q has view_hash %v (%T), want 16 hex digits as in the API", e.Message, v, v)
			}
			found = found || (s == want && e.Message == "muster: status converging → ready")
		}
		if found {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no \"muster: status converging → ready\" line with view_hash %s; view_hash lines: %d", want, logs.FilterFieldKey("view_hash").Len())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
