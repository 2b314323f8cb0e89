package channels

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/trace"
)

// replayHandler joins with a replay of n pushes of about size bytes each,
// subscribing first so live broadcasts during the join are held.
func replayHandler(n, size int) *funcHandler {
	pad := strings.Repeat("x", size)
	then := make([]Push, n) // built once: every join replays the same pushes
	for i := range then {
		then[i] = Push{Event: "ev", Payload: json.RawMessage(fmt.Sprintf(`{"i":%d,"pad":%q}`, i, pad))}
	}
	h := newFuncHandler()
	h.join = func(_ context.Context, ch *Channel, _ json.RawMessage) (JoinResult, error) {
		ch.Subscribe()
		return JoinResult{Then: then}, nil
	}
	return h
}

// A replay far larger than the socket's queue (250 events of 62 KB, 15.5 MB
// against the default 1,024 frames and 4 MiB) reaches a client that reads:
// the join reply first, every replayed event in order, then a live
// broadcast sent after the join, with no slow-consumer cut.
func TestReplayLargerThanQueueReachesAReader(t *testing.T) {
	const n, size = 250, 62 << 10
	ts := roomServer(t, replayHandler(n, size), EndpointConfig{})
	c := ts.dial(t, "?vsn=2.0.0")
	c.SendText(`["1","1","room:lobby","phx_join",{}]`)
	waitTrace(t, ts.tr, trace.Kind("join.done", "topic", "room:lobby"))
	if got := ts.ep.Hub().Broadcast("room:lobby", "live", json.RawMessage(`{"live":true}`), nil); got != 1 {
		t.Fatalf("broadcast reached %d sockets", got)
	}
	c.Expect(`["1","1","room:lobby","phx_reply",{"status":"ok","response":{}}]`)
	for i := 0; i < n; i++ {
		got, _ := c.ReadText()
		if want := fmt.Sprintf(`["1",null,"room:lobby","ev",{"i":%d,"pad":"`, i); !strings.HasPrefix(got, want) || len(got) < size {
			t.Fatalf("frame %d: %.80s (%d bytes), want %s…", i, got, len(got), want)
		}
	}
	c.Expect(`[null,null,"room:lobby","live",{"live":true}]`)
	c.Heartbeat("2")
	if st := ts.ep.Stats(); st.SlowConsumers != 0 || st.QueueDrops != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Under the same traffic, a client that stops reading after its join reply
// is cut as a slow consumer and one that reads is not: both join with the
// 15.5 MB replay, then live 62 KB events are broadcast one at a time, each
// once the reader has received the one before. The stopped client's replay
// and live frames fill the kernel's buffers, then its held or queued frames
// reach the limit (QueueSize 16).
func TestReplayCutsAStoppedReaderOnly(t *testing.T) {
	const n, size = 250, 62 << 10
	ts := roomServer(t, replayHandler(n, size), EndpointConfig{QueueSize: 16})
	join := `["1","1","room:lobby","phx_join",{}]`
	reply := `["1","1","room:lobby","phx_reply",{"status":"ok","response":{}}]`
	stopped := ts.dial(t, "?vsn=2.0.0")
	stopped.SendText(join)
	stopped.Expect(reply) // and nothing more

	reader := ts.dial(t, "?vsn=2.0.0")
	frames := make(chan string, 16)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		defer close(frames)
		for {
			_, b, err := reader.Conn().Read(context.Background())
			if err != nil {
				return
			}
			select {
			case frames <- string(b):
			case <-done:
				return
			}
		}
	}()
	next := func() string {
		t.Helper()
		select {
		case f, ok := <-frames:
			if !ok {
				t.Fatalf("the reader's connection ended\n%s", ts.tr.Dump())
			}
			return f
		case <-time.After(testTimeout):
			t.Fatal("the reader got no frame")
			return ""
		}
	}
	reader.SendText(join)
	if f := next(); f != reply {
		t.Fatalf("reader: %.80s, want the join reply", f)
	}
	for i := 0; i < n; i++ {
		if f, want := next(), fmt.Sprintf(`["1",null,"room:lobby","ev",{"i":%d,`, i); !strings.HasPrefix(f, want) {
			t.Fatalf("reader frame %d: %.80s", i, f)
		}
	}
	pad, _ := json.Marshal(map[string]string{"pad": strings.Repeat("y", size)})
	sent := 0
	for ; ts.tr.Count(trace.Kind("socket.slow")) == 0; sent++ {
		if sent == 5000 {
			t.Fatalf("the stopped client was not cut after %d live events (%d MB)", sent, sent*size>>20)
		}
		ts.ep.Hub().Broadcast("room:lobby", "live", pad, nil)
		if f := next(); !strings.HasPrefix(f, `[null,null,"room:lobby","live",`) {
			t.Fatalf("reader live frame %d: %.80s", sent, f)
		}
	}
	reader.SendText(`[null,"9","phoenix","heartbeat",{}]`)
	if f := next(); f != `[null,"9","phoenix","phx_reply",{"status":"ok","response":{}}]` {
		t.Fatalf("reader heartbeat reply: %.80s", f)
	}
	if st := ts.ep.Stats(); st.SlowConsumers != 1 || st.SocketsOpen < 1 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("the stopped client was cut after %d live events (%d MB)", sent, sent*size>>20)
}

// smallReplay is a handler whose join replays n small pushes {"i":i}.
func smallReplay(n int) *funcHandler {
	h := newFuncHandler()
	h.join = func(_ context.Context, ch *Channel, _ json.RawMessage) (JoinResult, error) {
		then := make([]Push, n)
		for i := range then {
			then[i] = Push{Event: "ev", Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		}
		return JoinResult{Then: then}, nil
	}
	return h
}

// A replay keeps its place in the socket's frame order, and is written in
// chunks of at most replayChunkFrames; a heartbeat received while the
// writer is stuck in the replay's first chunk is answered right after that
// chunk, not after the whole replay (heartbeat replies pass queued frames).
func TestReplayKeepsFrameOrder(t *testing.T) {
	const n = 3*replayChunkFrames + 5
	ep := NewEndpoint(EndpointConfig{QueueSize: 4, Tracer: trace.New()})
	ep.Handle("room:*", smallReplay(n))
	s, mt := memSocket(t, ep, V2)
	mt.gate, mt.waiting = make(chan struct{}), make(chan int, 64)
	recv(t, s, `["1","1","room:lobby","phx_join",{}]`)
	if b := <-mt.waiting; b != 1 { // the join reply
		t.Fatalf("first batch %d frames", b)
	}
	mt.gate <- struct{}{}
	if b := <-mt.waiting; b != replayChunkFrames {
		t.Fatalf("first replay chunk %d frames, want %d", b, replayChunkFrames)
	}
	recv(t, s, `[null,"2","phoenix","heartbeat",{}]`)
	close(mt.gate)
	got := mt.waitFrames(t, 1+n+1)
	if string(got[0].Data) != `["1","1","room:lobby","phx_reply",{"status":"ok","response":{}}]` {
		t.Fatalf("frame 0: %s", got[0].Data)
	}
	const hb = 1 + replayChunkFrames // after the first chunk
	if string(got[hb].Data) != `[null,"2","phoenix","phx_reply",{"status":"ok","response":{}}]` {
		t.Fatalf("frame %d: %s, want the heartbeat reply", hb, got[hb].Data)
	}
	for i := 0; i < n; i++ {
		k := 1 + i
		if k >= hb {
			k++
		}
		if want := fmt.Sprintf(`["1",null,"room:lobby","ev",{"i":%d}]`, i); string(got[k].Data) != want {
			t.Fatalf("frame %d: %s, want %s", k, got[k].Data, want)
		}
	}
	if st := ep.Stats(); st.SlowConsumers != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A leave during a replay drops what is left of it: after the chunk in
// flight come the leave reply and phx_close, and no replayed frame follows.
func TestReplayDroppedOnLeave(t *testing.T) {
	const n = 3 * replayChunkFrames
	ep := NewEndpoint(EndpointConfig{Tracer: trace.New()})
	ep.Handle("room:*", smallReplay(n))
	s, mt := memSocket(t, ep, V2)
	mt.gate, mt.waiting = make(chan struct{}), make(chan int, 64)
	recv(t, s, `["1","1","room:lobby","phx_join",{}]`)
	<-mt.waiting // the join reply
	mt.gate <- struct{}{}
	<-mt.waiting // the first replay chunk, in flight
	recv(t, s, `["1","2","room:lobby","phx_leave",{}]`)
	close(mt.gate)
	mt.waitFrames(t, 1+replayChunkFrames+2)
	s.Close(CloseGoingAway)
	mt.waitClosed(t)
	got := mt.written()
	if len(got) != 1+replayChunkFrames+2 {
		t.Fatalf("wrote %d frames, want %d (reply, one chunk, leave reply, phx_close)", len(got), 1+replayChunkFrames+2)
	}
	if a, b := string(got[len(got)-2].Data), string(got[len(got)-1].Data); a != `["1","2","room:lobby","phx_reply",{"status":"ok","response":{}}]` || b != `["1","1","room:lobby","phx_close",{}]` {
		t.Fatalf("last frames %s %s", a, b)
	}
}
