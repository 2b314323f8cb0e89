package channels

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
)

// ownHandler remembers the join ref its Join saw and reports it, with the
// join ref Terminate is called for, to a shared log.
type ownHandler struct {
	log      *terminationLog
	joinedAs string // set by Join; read by Terminate
}

type terminationLog struct {
	mu   sync.Mutex
	seen []string // "joined-as=terminated-for/reason"
}

func (h *ownHandler) Join(_ context.Context, ch *Channel, _ json.RawMessage) (JoinResult, error) {
	h.joinedAs = ch.JoinRef()
	ch.Subscribe()
	return JoinResult{}, nil
}

func (h *ownHandler) HandleIn(context.Context, *Channel, string, json.RawMessage) (any, error) {
	return map[string]string{"joined_as": h.joinedAs}, nil
}

func (h *ownHandler) Terminate(ch *Channel, reason CloseReason) {
	h.log.mu.Lock()
	defer h.log.mu.Unlock()
	h.log.seen = append(h.log.seen, h.joinedAs+"="+ch.JoinRef()+"/"+string(reason))
}

// TestHandleNewGivesEachJoinItsOwnHandler: with HandleNew every join gets a
// handler value of its own, a duplicate join included, and the value that
// ran a channel's Join serves its pushes and its Terminate.
func TestHandleNewGivesEachJoinItsOwnHandler(t *testing.T) {
	ep := NewEndpoint(EndpointConfig{})
	log := &terminationLog{}
	made := 0
	ep.HandleNew("room:*", func() Handler {
		made++ // joins run on the reader goroutine, one socket here
		return &ownHandler{log: log}
	})
	s, mt := memSocket(t, ep, V2)
	recv(t, s, `["1","1","room:a","phx_join",{}]`)
	recv(t, s, `["2","2","room:b","phx_join",{}]`)
	recv(t, s, `["3","3","room:a","phx_join",{}]`) // duplicate: ends join 1
	recv(t, s, `["3","4","room:a","ping",{}]`)
	recv(t, s, `["2","5","room:b","phx_leave",{}]`)
	f := mt.waitFrames(t, 6)
	if got, want := string(f[4].Data), `["3","4","room:a","phx_reply",{"status":"ok","response":{"joined_as":"3"}}]`; got != want {
		t.Fatalf("push reply %s, want %s", got, want)
	}
	if made != 3 {
		t.Fatalf("%d handlers made for 3 joins", made)
	}
	log.mu.Lock()
	got := slices.Clone(log.seen)
	log.mu.Unlock()
	slices.Sort(got)
	want := []string{"1=1/" + string(ReasonDuplicateJoin), "2=2/" + string(ReasonLeave)}
	if !slices.Equal(got, want) {
		t.Fatalf("terminations %v, want %v", got, want)
	}
}
