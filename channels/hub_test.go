package channels

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"

	"github.com/relaygw/relay/internal/trace"
)

type hookLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *hookLog) add(s string) {
	l.mu.Lock()
	l.calls = append(l.calls, s)
	l.mu.Unlock()
}

func (l *hookLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls...)
}

func hookedEndpoint(tr *trace.Tracer) (*Endpoint, *hookLog) {
	log := &hookLog{}
	hub := NewHubWithConfig(HubConfig{
		Shards:            4,
		OnFirstSubscriber: func(topic string) { log.add("first " + topic) },
		OnLastUnsubscribe: func(topic string) { log.add("last " + topic) },
		Tracer:            tr,
	})
	// These tests are about the hub, not backpressure: a socket's queue
	// holds every frame TestHubConcurrentChurn can send it (200 join and
	// 200 leave replies, 1,600 broadcasts), so a writer goroutine the
	// loaded host does not schedule cannot get the socket cut as a slow
	// consumer (1013) mid-test.
	ep := NewEndpoint(EndpointConfig{Hub: hub, Tracer: tr, QueueSize: 4096, QueueMaxLag: -1})
	ep.Handle("room:*", newFuncHandler())
	return ep, log
}

func TestHubHooksFollowTransitions(t *testing.T) {
	ep, log := hookedEndpoint(nil)
	hub := ep.Hub()
	a, _ := memSocket(t, ep, V2)
	b, _ := memSocket(t, ep, V2)
	recv(t, a, `["1","1","room:x","phx_join",{}]`)
	recv(t, b, `["1","1","room:x","phx_join",{}]`)
	recv(t, a, `["2","2","room:y","phx_join",{}]`)
	if hub.Subscribers("room:x") != 2 || hub.Subscribers("room:y") != 1 || hub.Subscribers("room:z") != 0 {
		t.Fatal("subscriber counts")
	}
	topics := hub.Topics()
	slices.Sort(topics)
	if !slices.Equal(topics, []string{"room:x", "room:y"}) {
		t.Fatalf("topics %v", topics)
	}
	recv(t, a, `["1","3","room:x","phx_leave",{}]`)
	recv(t, b, `["1","3","room:x","phx_leave",{}]`)
	recv(t, b, `["4","4","room:x","phx_join",{}]`)
	a.End()
	want := []string{"first room:x", "first room:y", "last room:x", "first room:x", "last room:y"}
	if got := log.get(); !slices.Equal(got, want) {
		t.Fatalf("hooks %v, want %v", got, want)
	}
	b.End()
	if got := log.get(); got[len(got)-1] != "last room:x" {
		t.Fatalf("hooks %v", got)
	}
	if len(hub.Topics()) != 0 {
		t.Fatalf("topics left: %v", hub.Topics())
	}
	var n int
	for i := range hub.shards {
		n += len(hub.shards[i].topics)
	}
	if n != 0 {
		t.Fatalf("%d empty topic entries kept", n)
	}
}

// While the first subscriber's hook is parked, a second join and leave of the
// same topic wait for it; another topic is not held up; broadcasts go on.
func TestHubHooksSerializedPerTopic(t *testing.T) {
	tr := trace.New()
	ep, log := hookedEndpoint(tr)
	a, _ := memSocket(t, ep, V2)
	b, _ := memSocket(t, ep, V2)
	c, _ := memSocket(t, ep, V2)
	tr.Park(trace.Kind("hub.first", "topic", "room:x"), trace.Kind("test.release"))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		recv(t, a, `["1","1","room:x","phx_join",{}]`)
	}()
	waitTrace(t, tr, trace.Kind("hub.first", "topic", "room:x"))
	go func() {
		defer wg.Done()
		recv(t, b, `["1","1","room:x","phx_join",{}]`)
		recv(t, b, `["1","2","room:x","phx_leave",{}]`)
		tr.Emit("test.b_done")
	}()
	waitTrace(t, tr, trace.Kind("join.start", "socket", b.ID()))
	recv(t, c, `["1","1","room:y","phx_join",{}]`) // another topic proceeds
	if n := ep.Hub().Broadcast("room:x", "ev", json.RawMessage(`{}`), nil); n != 1 {
		t.Fatalf("broadcast during a parked hook reached %d", n)
	}
	if got := log.get(); !slices.Equal(got, []string{"first room:y"}) {
		t.Fatalf("hooks while parked %v", got)
	}
	if tr.Count(trace.Kind("test.b_done")) != 0 {
		t.Fatal("second join of the topic finished while the first hook was parked")
	}
	tr.Emit("test.release")
	wg.Wait()
	a.End()
	want := []string{"first room:y", "first room:x", "last room:x"}
	if got := log.get(); !slices.Equal(got, want) {
		t.Fatalf("hooks %v, want %v", got, want)
	}
	if f := tr.Failures(); len(f) != 0 {
		t.Fatal(f)
	}
}

// Concurrent joins, leaves and broadcasts on a few topics keep the hook
// sequence of every topic alternating first/last, and counts consistent.
func TestHubConcurrentChurn(t *testing.T) {
	ep, log := hookedEndpoint(nil)
	topics := []string{"room:a", "room:b", "room:c"}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		s, _ := memSocket(t, ep, V2)
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				topic := topics[(w+i)%len(topics)]
				ref := itoa(i + 1)
				recv(t, s, `["`+ref+`","`+ref+`","`+topic+`","phx_join",{}]`)
				ep.Hub().Broadcast(topic, "ev", json.RawMessage(`{}`), nil)
				recv(t, s, `["`+ref+`","x","`+topic+`","phx_leave",{}]`)
			}
		}(w)
	}
	wg.Wait()
	per := map[string][]string{}
	for _, c := range log.get() {
		kind, topic, _ := cut(c)
		per[topic] = append(per[topic], kind)
	}
	for topic, seq := range per {
		for i, k := range seq {
			if (i%2 == 0) != (k == "first") {
				t.Fatalf("%s hook sequence broken at %d: %v", topic, i, seq)
			}
		}
		if len(seq)%2 != 0 {
			t.Fatalf("%s ends subscribed: %v", topic, seq)
		}
	}
	if len(ep.Hub().Topics()) != 0 {
		t.Fatalf("topics left %v", ep.Hub().Topics())
	}
}

func cut(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func TestSubscribeAfterEndIsNoop(t *testing.T) {
	ep := NewEndpoint(EndpointConfig{})
	chans := make(chan *Channel, 1)
	h := newFuncHandler()
	h.join = func(ctx context.Context, ch *Channel, p json.RawMessage) (JoinResult, error) {
		chans <- ch
		return JoinResult{}, nil
	}
	ep.Handle("room:*", h)
	s, _ := memSocket(t, ep, V2)
	recv(t, s, `["1","1","room:x","phx_join",{}]`)
	ch := <-chans
	ch.Close()
	ch.Subscribe()
	if n := ep.Hub().Subscribers("room:x"); n != 0 {
		t.Fatalf("closed channel subscribed: %d", n)
	}
}

// A channel subscribed with its join_ref gets the topic's broadcasts as
// pushes carrying it; the others get [null,null,...]. After a duplicate
// join, the old join's ref is never on a frame again.
func TestHubBroadcastWithJoinRef(t *testing.T) {
	hub := NewHub()
	ep := NewEndpoint(EndpointConfig{Hub: hub})
	h := newFuncHandler()
	h.join = func(_ context.Context, ch *Channel, p json.RawMessage) (JoinResult, error) {
		if string(p) == `{"ref":true}` {
			ch.SubscribeWithJoinRef()
		} else {
			ch.Subscribe()
		}
		return JoinResult{}, nil
	}
	ep.Handle("room:*", h)
	a, at := memSocket(t, ep, V2)
	b, bt := memSocket(t, ep, V2)
	c, ct := memSocket(t, ep, V2)
	recv(t, a, `["3","3","room:x","phx_join",{"ref":true}]`)
	recv(t, b, `["3","3","room:x","phx_join",{"ref":true}]`)
	recv(t, c, `["3","3","room:x","phx_join",{}]`)
	recv(t, a, `["7","7","room:x","phx_join",{"ref":true}]`) // supersedes "3"
	if n := hub.Broadcast("room:x", "ev", json.RawMessage(`{"n":1}`), nil); n != 3 {
		t.Fatalf("broadcast reached %d channels, want 3", n)
	}
	// a: join 3 reply, join 7 reply, phx_close of 3, the event.
	if got := string(at.waitFrames(t, 4)[3].Data); got != `["7",null,"room:x","ev",{"n":1}]` {
		t.Fatalf("a got %s", got)
	}
	if got := string(bt.waitFrames(t, 2)[1].Data); got != `["3",null,"room:x","ev",{"n":1}]` {
		t.Fatalf("b got %s", got)
	}
	if got := string(ct.waitFrames(t, 2)[1].Data); got != `[null,null,"room:x","ev",{"n":1}]` {
		t.Fatalf("c got %s", got)
	}
}
