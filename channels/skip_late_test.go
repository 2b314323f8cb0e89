package channels

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/relaygw/relay/internal/trace"
)

// A replayed event's live copy can arrive after the join reply (the log was
// written before the event was published, and the publish travels between
// nodes). Skip still drops it; later broadcasts pass.
func TestJoinSkipAppliesAfterReply(t *testing.T) {
	hub := NewHub()
	h := newFuncHandler()
	h.join = func(ctx context.Context, ch *Channel, p json.RawMessage) (JoinResult, error) {
		ch.Subscribe()
		return JoinResult{
			Then: []Push{{Event: "ev", Payload: json.RawMessage(`{"seq":1}`)}, {Event: "ev", Payload: json.RawMessage(`{"seq":2}`)}},
			Skip: func(b *Broadcast) bool { return b.Meta.(int) <= 2 },
		}, nil
	}
	ts := newTestServer(t, EndpointConfig{Hub: hub}, map[string]Handler{"room:*": h})
	c := ts.dial(t, "?vsn=2.0.0")
	c.SendText(`["3","3","room:lobby","phx_join",{}]`)
	c.Expect(`["3","3","room:lobby","phx_reply",{"status":"ok","response":{}}]`)
	c.Expect(`["3",null,"room:lobby","ev",{"seq":1}]`)
	c.Expect(`["3",null,"room:lobby","ev",{"seq":2}]`)
	if n := hub.Broadcast("room:lobby", "ev", json.RawMessage(`{"seq":2}`), 2); n != 0 {
		t.Fatalf("the late live copy of a replayed event went to %d channels, want 0", n)
	}
	hub.Broadcast("room:lobby", "ev", json.RawMessage(`{"seq":3}`), 3)
	c.Expect(`[null,null,"room:lobby","ev",{"seq":3}]`)
	if got := ts.tr.Count(trace.Kind("channel.skipped")); got != 1 {
		t.Fatalf("skipped %d, want 1", got)
	}
}
