package gateway

import (
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/phxtest"
)

// TestJoinWithCursorAheadOfLogGetsLiveEvents: a join whose last_event is
// ahead of everything the replay log holds (a cursor from before an
// embedded node restarted, or from a wiped store) is told recovered:false,
// and live events still reach it. The cursor used to become the live
// cut-off, so every event up to it was dropped without a trace while the
// client, following the reply, refetched history and waited for them.
func TestJoinWithCursorAheadOfLogGetsLiveEvents(t *testing.T) {
	n, srv, _ := testNode(t, nil)
	tok, err := n.Auth().Mint("u", []string{"*"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ws := phxtest.DialT(t, phxtest.URL(srv.URL, tok))
	reply := ws.Join("session:ahead", map[string]any{"last_event": map[string]any{"epoch": 1, "seq": 50}})
	if reply["recovered"] != false || reply["reason"] != "replay_truncated" {
		t.Fatalf("join reply %v, want recovered:false replay_truncated", reply)
	}
	acc := post(t, srv, "ahead", "hello")
	evs := ws.EventsUntil("turn_completed")
	if len(evs) == 0 || evs[0].Type != "user_event" || float64(evs[0].Seq) != acc["seq"] {
		t.Fatalf("live events after the join: %+v, want the user_event at %v first", evs, acc["seq"])
	}
}
