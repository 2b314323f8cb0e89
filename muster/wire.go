package muster

import (
	"encoding/json"
	"fmt"
)

// Message kinds on the wire. Every message is one JSON object (see wireMsg);
// the sender's node name is the transport's from, its incarnation is Inc.
const (
	kindPing       = "ping"  // broadcast: liveness and node discovery
	kindDiscover   = "disc"  // send: pair with me (View/WM piggybacked)
	kindDiscoverOK = "ack"   // send: reply to disc (View/WM piggybacked)
	kindMarker     = "mark"  // send: my view is View at watermark Seq
	kindExpelled   = "exp"   // send: I declared your incarnation Target departed
	kindLeaving    = "leave" // broadcast: I am draining, depart me
	kindLeaveOK    = "lack"  // send: I departed you
	kindOccupied   = "occ"   // call: I hold Group at Seq
	kindVacant     = "vac"   // call: I vacated Groups at Seq
	kindRound      = "round" // call: rebalance round (Full snapshot or delta) at Seq with View
	kindPrepare    = "prep"  // call: I am changing view (round Seq); invalidate me
)

// wireMsg is the single message shape. Fields a kind does not use are empty.
type wireMsg struct {
	Kind   string   `json:"k"`
	Inc    uint64   `json:"i"`
	Group  string   `json:"g,omitempty"`
	Groups []string `json:"gs,omitempty"`
	Seq    Seq      `json:"s"`
	// View is the sender's view hash; nil when withheld (discover-ack to a
	// node we owe a snapshot, or during a prepare round).
	View   *uint64 `json:"v,omitempty"`
	WM     *Seq    `json:"w,omitempty"`
	Full   bool    `json:"full,omitempty"`
	Target uint64  `json:"t,omitempty"`
	// Move is the sender's last ring transition, on rebalance rounds and
	// markers (see ringMove).
	Move *ringMove `json:"mv,omitempty"`
}

// ringMove is a ring transition: at seq Seq the sender's ring went from the
// member names Prev to Cur (both sorted, ring names ignore incarnations).
// Every group it held that moved onto a router in that transition was sent
// to that router in the round at Seq, so a router reading it knows that the
// sender's rows below Seq for the other groups that moved onto it are
// retracted (see coordinator.retractMoved).
type ringMove struct {
	Seq  Seq      `json:"s"`
	Prev []string `json:"p"`
	Cur  []string `json:"c"`
}

var okReply = []byte(`{"ok":true}`)

func encode(m *wireMsg) []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("muster: encode %s: %v", m.Kind, err))
	}
	return b
}

// decode parses one message from a peer. It returns an error wrapping
// ErrBadMessage for anything that is not a well-formed message of a known
// kind.
func decode(b []byte) (*wireMsg, error) {
	var m wireMsg
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	switch m.Kind {
	case kindPing, kindDiscover, kindDiscoverOK, kindMarker, kindExpelled, kindLeaving, kindLeaveOK, kindPrepare:
	case kindOccupied:
		if m.Group == "" {
			return nil, fmt.Errorf("%w: occupied without group", ErrBadMessage)
		}
	case kindVacant, kindRound:
	default:
		return nil, fmt.Errorf("%w: unknown kind %q", ErrBadMessage, m.Kind)
	}
	if m.Inc == 0 {
		return nil, fmt.Errorf("%w: zero incarnation", ErrBadMessage)
	}
	if m.Kind == kindMarker && (m.View == nil) {
		return nil, fmt.Errorf("%w: marker without view", ErrBadMessage)
	}
	if mv := m.Move; mv != nil && (mv.Seq.Inc != m.Inc || len(mv.Prev) == 0 || len(mv.Cur) == 0) {
		return nil, fmt.Errorf("%w: ring move of another incarnation or without members", ErrBadMessage)
	}
	return &m, nil
}
