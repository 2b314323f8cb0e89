package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// A drain of 1,000 sockets closes them with 1012 in batches of
// SOCKET_DRAIN_BATCH, spread over the drain window (the trace shows ten
// distinct batch points, each followed by its hundred closes); the retry
// directives answered while it drains carry jittered, distinct after_ms;
// and every event accepted (202) before or during the drain is in its
// session's history or inbox afterwards.
func TestDrainSpreadsClosesAndJittersRetries(t *testing.T) {
	const sockets, batch = 1000, 100
	n, srv, tr := testNode(t, func(c *Config) {
		c.SocketDrainBatch = batch
		c.DrainWindow = 10 * time.Second
	})
	tok, _ := n.Auth().Mint("u", []string{"*"}, time.Hour)
	wsURL := "ws" + strings.TrimPrefix(srv.URL, "http") + "/socket/websocket?vsn=2.0.0&token=" + tok
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // hang guard
	defer cancel()

	codes := make(chan websocket.StatusCode, sockets)
	var readers sync.WaitGroup
	for i := 0; i < sockets; i++ {
		c, _, err := websocket.Dial(ctx, wsURL, nil)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		readers.Add(1)
		go func() { // reads until the server closes, answering its close frame
			defer readers.Done()
			defer c.CloseNow()
			for {
				if _, _, err := c.Read(ctx); err != nil {
					codes <- websocket.CloseStatus(err)
					return
				}
			}
		}()
	}

	type accepted struct{ session, text string }
	var acc []accepted
	post := func(i int) (int, map[string]any) {
		id, text := fmt.Sprintf("dr%d", i%10), fmt.Sprintf("m%d", i)
		status, _, body := do(t, "POST", srv.URL+"/api/sessions/"+id+"/events", testAPIKey, "", `{"data":{"text":"`+text+`"}}`)
		if status == http.StatusAccepted {
			acc = append(acc, accepted{id, text})
		}
		return status, body
	}
	for i := 0; i < 20; i++ {
		if status, body := post(i); status != http.StatusAccepted {
			t.Fatalf("post %d before the drain: %d %v", i, status, body)
		}
	}

	drained := make(chan error, 1)
	go func() {
		dctx, dcancel := context.WithTimeout(context.Background(), n.cfg.DrainWindow)
		defer dcancel()
		drained <- n.Drain(dctx)
	}()
	// Events posted while the node drains: accepted, or refused with a
	// retry directive.
	var afters []float64
	for i := 20; len(afters) < 50; i++ {
		status, body := post(i)
		switch status {
		case http.StatusAccepted:
		case http.StatusServiceUnavailable:
			retry, _ := body["retry"].(map[string]any)
			if body["error"] != CodeDraining || retry == nil {
				t.Fatalf("post %d during the drain: %d %v, want 503 draining with a retry directive", i, status, body)
			}
			afters = append(afters, retry["after_ms"].(float64))
		default:
			t.Fatalf("post %d during the drain: %d %v", i, status, body)
		}
		if ctx.Err() != nil {
			t.Fatal("hang guard")
		}
	}
	if err := <-drained; err != nil {
		t.Fatalf("drain: %v", err)
	}
	readers.Wait()
	close(codes)
	restart := 0
	for c := range codes {
		if c == websocket.StatusServiceRestart {
			restart++
		}
	}
	if restart != sockets {
		t.Fatalf("%d of %d sockets closed with 1012", restart, sockets)
	}

	// Ten batch points, each followed by exactly its sockets' closes.
	batches, inBatch := 0, 0
	for _, e := range tr.Events() {
		switch {
		case e.Kind == "endpoint.drain_batch":
			if batches > 0 && inBatch != batch {
				t.Fatalf("batch %d closed %d sockets, want %d", batches-1, inBatch, batch)
			}
			batches++
			inBatch = 0
		case e.Kind == "socket.close" && e.Get("code") == 1012:
			inBatch++
		}
	}
	if batches != sockets/batch || inBatch != batch {
		t.Fatalf("%d batches (last %d sockets), want %d of %d", batches, inBatch, sockets/batch, batch)
	}

	distinct := map[float64]bool{}
	for _, a := range afters {
		distinct[a] = true
	}
	t.Logf("after_ms of %d refusals: %d distinct, e.g. %v", len(afters), len(distinct), afters[:5])
	if len(distinct) < len(afters)-10 { // 50 draws over 1,000 values
		t.Fatalf("after_ms values %v: only %d distinct", afters, len(distinct))
	}

	// No accepted event lost.
	for _, a := range acc {
		status, _, body := do(t, "GET", srv.URL+"/api/sessions/"+a.session+"?limit=1000", testAPIKey, "", "")
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d %v", a.session, status, body)
		}
		found := false
		for _, key := range []string{"history", "pending"} {
			list, _ := body[key].([]any)
			for _, m := range list {
				mm := m.(map[string]any)
				if mm["role"] == "user" && mm["content"] == a.text {
					found = true
				}
			}
		}
		if !found {
			t.Fatalf("accepted event %s in %s is in neither history nor inbox: %v", a.text, a.session, body)
		}
	}
	t.Logf("%d accepted events all kept", len(acc))
}
