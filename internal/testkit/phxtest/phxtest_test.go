package phxtest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/relaygw/relay/internal/testkit/phxtest"
)

// server is a scripted V2 peer: it answers phx_join, heartbeat and the
// barrier's phx_leave with ok, pushes one session event before answering a join, and closes with
// 4000 on "bye".
func server(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		ctx := r.Context()
		for {
			_, b, err := conn.Read(ctx)
			if err != nil {
				return
			}
			f, err := phxtest.DecodeFrame(b)
			if err != nil {
				return
			}
			write := func(v []any) {
				out, _ := json.Marshal(v)
				_ = conn.Write(ctx, websocket.MessageText, out)
			}
			switch f.Event {
			case "bye":
				_ = conn.Close(4000, "bye")
				return
			case "phx_join":
				write([]any{nil, nil, f.Topic, "user_event", map[string]any{"session": "s1", "epoch": 1, "seq": 7, "type": "user_event", "data": map[string]any{}}})
			}
			response := json.RawMessage(`{}`)
			if f.Topic != "phoenix" && f.Topic != phxtest.BarrierTopic {
				response, _ = json.Marshal(map[string]string{"topic": f.Topic})
			}
			reply := struct {
				Status   string          `json:"status"`
				Response json.RawMessage `json:"response"`
			}{"ok", response}
			write([]any{f.JoinRef, f.Ref, f.Topic, "phx_reply", reply})
		}
	}))
	t.Cleanup(srv.Close)
	return phxtest.URL(srv.URL, "tok")
}

func TestSocketJoinBarrierAndEvents(t *testing.T) {
	url := server(t)
	if !strings.HasSuffix(url, "/socket/websocket?vsn=2.0.0&token=tok") || !strings.HasPrefix(url, "ws://") {
		t.Fatalf("URL = %s", url)
	}
	ctx := context.Background()
	s, _, err := phxtest.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp, err := s.Join(ctx, "session:s1", map[string]any{})
	if err != nil || string(resp) != `{"topic":"session:s1"}` {
		t.Fatalf("join = %s, %v", resp, err)
	}
	if err := s.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if evs := s.Events(); len(evs) != 1 || evs[0].Seq != 7 || evs[0].Type != "user_event" {
		t.Fatalf("events = %+v, want the one pushed before the join reply", evs)
	}
}

func TestTJoinUntilAndClose(t *testing.T) {
	c := phxtest.DialT(t, server(t))
	if r := c.Join("session:s1", map[string]any{}); r["topic"] != "session:s1" {
		t.Fatalf("join response = %v", r)
	}
	ref := c.Send("", "session:s2", "phx_join", map[string]any{})
	f, evs := c.Until(ref)
	if f.Event != "phx_reply" || f.JoinRef == nil || *f.JoinRef != ref || len(evs) != 1 || evs[0].Seq != 7 {
		t.Fatalf("until %s = %+v with events %+v", ref, f, evs)
	}
	if evs := c.Barrier(); len(evs) != 0 {
		t.Fatalf("barrier events = %+v, want none", evs)
	}
	c.Heartbeat("100")
	c.SendText(`[null,"101","phoenix","bye",{}]`)
	if code := c.ExpectClose(); code != 4000 {
		t.Fatalf("close status %v, want 4000", code)
	}
}
