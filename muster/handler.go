package muster

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
)

var _ Handler = (*Scope)(nil)

// inbound is a decoded message for the coordinator.
type inbound struct {
	from string
	m    *wireMsg
}

// inboundCall is a decoded Call the coordinator must answer.
type inboundCall struct {
	from  string
	m     *wireMsg
	reply chan error
}

// nodeSeen tells the coordinator a node incarnation was heard for the first
// time (the counterpart of a nodeup).
type nodeSeen struct{ id NodeID }

// HandleMessage implements Handler: it decodes a peer's Send or Broadcast,
// refreshes the failure detector and hands the message to the coordinator.
func (s *Scope) HandleMessage(from string, b []byte) {
	m, err := decode(b)
	if err != nil {
		s.log.Debug("muster: dropping bad message", zap.String("from", from), zap.Error(err))
		return
	}
	if from == s.self {
		return
	}
	s.heard(from, m.Inc)
	if m.Kind == kindPing {
		return
	}
	s.coord.mbox.postAsync(&inbound{from, m})
}

// heard refreshes liveness and reports a new incarnation to the coordinator.
func (s *Scope) heard(from string, inc uint64) {
	if s.live.heard(from, inc, time.Now()) {
		s.coord.mbox.postAsync(&nodeSeen{NodeID{from, inc}})
	}
}

// HandleCall implements Handler. Occupied and vacant-batch writes go straight
// to the occupancy table (never through the coordinator); rounds and
// prepares are applied by the coordinator.
func (s *Scope) HandleCall(ctx context.Context, from string, req []byte) ([]byte, error) {
	m, err := decode(req)
	if err != nil {
		return nil, err
	}
	s.heard(from, m.Inc)
	switch m.Kind {
	case kindOccupied:
		return s.applyOccupied(from, m)
	case kindVacant:
		return s.applyVacant(from, m)
	case kindRound, kindPrepare:
		c := &inboundCall{from: from, m: m, reply: make(chan error, 1)}
		if err := s.coord.mbox.post(ctx, c); err != nil {
			return nil, err
		}
		select {
		case err := <-c.reply:
			if err != nil {
				return nil, err
			}
			return okReply, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.closing:
			return nil, ErrClosed
		}
	}
	return nil, fmt.Errorf("%w: kind %q is not a call", ErrBadMessage, m.Kind)
}

func (s *Scope) applyOccupied(from string, m *wireMsg) ([]byte, error) {
	s.tr.Emit("muster_occupied_apply", "span", "start", "scope", s.name, "node", s.self, "group", m.Group, "source", from, "seq", m.Seq)
	changed, a := s.occ.upsert(m.Group, from, m.Seq, false, time.Now())
	s.tr.Emit("muster_occupied_apply", "span", "complete", "scope", s.name, "node", s.self, "group", m.Group, "source", from, "seq", m.Seq, "changed", changed)
	switch a {
	case admitDeparted:
		return nil, ErrNotPeer
	case admitStale:
		return okReply, nil
	}
	if changed {
		s.tr.Emit("muster_occupied", "scope", s.name, "node", s.self, "group", m.Group, "source", from, "seq", m.Seq)
	}
	s.log.Debug("muster: occupied", zap.String("group", m.Group), zap.String("source", from), zap.Stringer("seq", m.Seq), zap.Bool("applied", changed))
	return okReply, nil
}

func (s *Scope) applyVacant(from string, m *wireMsg) ([]byte, error) {
	s.tr.Emit("muster_vacant_batch", "span", "start", "scope", s.name, "node", s.self, "source", from, "seq", m.Seq, "groups", len(m.Groups))
	now := time.Now()
	for _, g := range m.Groups {
		_, a := s.occ.upsert(g, from, m.Seq, true, now)
		if a == admitDeparted {
			s.tr.Emit("muster_vacant_batch", "span", "complete", "scope", s.name, "node", s.self, "source", from, "seq", m.Seq, "refused", true)
			return nil, ErrNotPeer
		}
		if a == admitStale {
			break
		}
	}
	s.tr.Emit("muster_vacant_batch", "span", "complete", "scope", s.name, "node", s.self, "source", from, "seq", m.Seq, "refused", false)
	s.log.Debug("muster: vacant batch", zap.String("source", from), zap.Int("groups", len(m.Groups)), zap.Stringer("seq", m.Seq))
	return okReply, nil
}
