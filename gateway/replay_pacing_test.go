package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/phxtest"
)

// TestReplayBiggerThanSocketQueueReachesReader: the replay log holds 250
// events of 62 KB (15.5 MB, well past the socket's 4 MiB queue); a client
// that joins with last_event {0,0} and reads gets the join reply with
// replayed:250 and every event in order, at the default settings.
func TestReplayBiggerThanSocketQueueReachesReader(t *testing.T) {
	const n, size = 250, 62 << 10
	node, srv, _ := testNode(t, nil)
	// A hang guard only: 15.5 MB through -race on a loaded 2-core machine
	// took over 30 s.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	text := strings.Repeat("w", size)
	for i := 1; i <= n; i++ {
		data, _ := json.Marshal(map[string]string{"text": text})
		ev := agent.Event{Session: "big", Epoch: 1, Seq: int64(i), Type: agent.TypeDelta, Data: data, At: time.Now().UTC()}
		if err := node.replay.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	tok, _ := node.Auth().Mint("u", []string{"*"}, time.Hour)
	ws := phxtest.DialT(t, phxtest.URL(srv.URL, tok))
	ws.Conn().SetReadLimit(-1)
	reply := ws.Join("session:big", map[string]any{"last_event": map[string]int{"epoch": 0, "seq": 0}})
	if reply["replayed"] != float64(n) || reply["recovered"] != true {
		t.Fatalf("join reply %v, want replayed:%d recovered:true", reply, n)
	}
	for i := 1; i <= n; i++ {
		f, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("replayed event %d: %v", i, err)
		}
		var ev phxtest.SessionEvent
		if err := json.Unmarshal(f.Payload, &ev); err != nil || ev.Seq != int64(i) || len(ev.Data) < size {
			t.Fatalf("replayed event %d: %v %.80s", i, err, f.Payload)
		}
	}
	ws.Barrier()
	if m := node.endpoint.Stats(); m.SlowConsumers != 0 {
		t.Fatalf("slow consumers: %d", m.SlowConsumers)
	}
}
