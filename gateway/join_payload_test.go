package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/phxtest"
)

// TestJoinPayloadRefused: a join payload that is not the documented shape
// (unknown keys, negative positions, wrong types, trailing data) is refused
// with invalid_body, and the refused join leaves the topic unjoined: a
// documented join of the same topic on the same socket then succeeds.
func TestJoinPayloadRefused(t *testing.T) {
	n, srv, _ := testNode(t, nil)
	tok, err := n.Auth().Mint("u", []string{"*"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ws := phxtest.DialT(t, phxtest.URL(srv.URL, tok))
	bad := []string{
		`{"last_event":{"epoch":-1,"seq":-5}}`,
		`{"last_event":{"epoch":0,"seq":-1}}`,
		`{"last_event":{"epoch":-1,"seq":0}}`,
		`{"bogus":1}`,
		`{"last_event":{"epoch":0,"seq":0,"x":1}}`,
		`{"last_event":{"epoch":"0","seq":0}}`,
		`{"last_event":{"epoch":0.5,"seq":0}}`,
		`{"presence":"no"}`,
		`[1]`,
		`"x"`,
		`7`,
	}
	for i, raw := range bad {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r, err := ws.S.Call(ctx, "", "session:jp-1", "phx_join", json.RawMessage(raw))
		cancel()
		if err != nil {
			t.Fatalf("join %s: %v", raw, err)
		}
		var body struct{ Reason, Message string }
		_ = json.Unmarshal(r.Response, &body)
		if r.Status != "error" || body.Reason != CodeInvalidBody || !strings.Contains(body.Message, "join payload") {
			t.Fatalf("case %d: join %s: %s %s, want error invalid_body", i, raw, r.Status, r.Response)
		}
	}
	for _, ok := range []any{
		nil,
		map[string]any{},
		map[string]any{"presence": false},
		map[string]any{"last_event": nil},
		map[string]any{"last_event": map[string]any{"epoch": 0, "seq": 0}, "presence": true},
	} {
		ws2 := phxtest.DialT(t, phxtest.URL(srv.URL, tok))
		if reply := ws2.Join("session:jp-1", ok); reply["node"] == nil {
			t.Fatalf("join %v: reply %v", ok, reply)
		}
	}
	reply := ws.Join("session:jp-1", map[string]any{"last_event": map[string]any{"epoch": 0, "seq": 0}})
	if reply["recovered"] != true {
		t.Fatalf("documented join after refusals: %v", reply)
	}
}

// FuzzDecodeJoinParams: whatever the payload, an accepted join never holds a
// negative position, and a refusal returns no params.
func FuzzDecodeJoinParams(f *testing.F) {
	for _, s := range []string{
		``, `null`, `{}`, `{"presence":false}`, `{"last_event":{"epoch":1,"seq":2}}`,
		`{"last_event":{"epoch":-1,"seq":-5}}`, `{"bogus":1}`, `{"last_event":null}`,
		`{"last_event":{"epoch":0,"seq":0}} {}`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodeJoinParams(b)
		if err != nil {
			if p.LastEvent != nil || p.Presence != nil {
				t.Fatalf("refused %q but returned %+v", b, p)
			}
			return
		}
		if p.LastEvent != nil && (p.LastEvent.Epoch < 0 || p.LastEvent.Seq < 0) {
			t.Fatalf("accepted %q with negative position %+v", b, *p.LastEvent)
		}
	})
}
