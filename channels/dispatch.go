package channels

import (
	"encoding/json"
	"errors"
	"fmt"

	"go.uber.org/zap"
)

// dispatch routes one decoded frame (docs/PHOENIX.md §3; socket.ex
// handle_in clauses, in the same order).
func (s *Socket) dispatch(m *Message) {
	switch {
	case m.Topic == topicPhoenix && m.Event == eventHeartbeat:
		s.replyControl(Ref{}, m.Ref, m.Topic, statusOK, Payload{JSON: emptyObject})
	case m.Event == eventJoin:
		s.join(m)
	case m.Event == eventLeave:
		s.leave(m)
	default:
		s.push(m)
	}
}

// reply enqueues a phx_reply in order with the socket's other frames: a
// channel's frames never pass its join reply, its leave reply never passes
// the pushes before it, and a push reply follows what the handler pushed
// while handling the push (Phoenix's order).
func (s *Socket) reply(joinRef, ref Ref, topic, status string, p Payload) {
	if f, ok := s.encodeReply(joinRef, ref, topic, status, p); ok {
		s.enqueue(f)
	}
}

// replyControl enqueues a phx_reply in the control lane (Socket.enqueueControl):
// a heartbeat reply, which belongs to no channel and which the client times
// out on, never waits behind queued pushes or a replay.
func (s *Socket) replyControl(joinRef, ref Ref, topic, status string, p Payload) {
	if f, ok := s.encodeReply(joinRef, ref, topic, status, p); ok {
		s.enqueueControl(f)
	}
}

func (s *Socket) encodeReply(joinRef, ref Ref, topic, status string, p Payload) (Frame, bool) {
	f, err := s.ser.EncodeReply(joinRef, ref, topic, status, p)
	if err != nil {
		s.ep.log.Error("encode reply", zap.String("topic", topic), zap.Error(err))
		f, err = s.ser.EncodeReply(joinRef, ref, topic, statusError, reasonPayload(ReasonInternal))
		if err != nil {
			s.Close(CloseInternal)
			return Frame{}, false
		}
	}
	return f, true
}

func reasonPayload(reason string) Payload {
	b, _ := json.Marshal(map[string]string{"reason": reason})
	return Payload{JSON: b}
}

// errorPayload turns a handler error into an error reply's response.
func (s *Socket) errorPayload(op, topic string, err error) Payload {
	var re *ReplyError
	if errors.As(err, &re) {
		b, merr := json.Marshal(re.response())
		if merr == nil {
			return Payload{JSON: b}
		}
		err = fmt.Errorf("encode reply error %q: %w", re.Reason, merr)
	}
	s.ep.log.Error("channel handler failed", zap.String("op", op),
		zap.String("topic", topic), zap.String("socket", s.id), zap.Error(err))
	return reasonPayload(ReasonInternal)
}

// join handles phx_join (§3.2, §3.3).
func (s *Socket) join(m *Message) {
	tr := s.ep.cfg.Tracer
	newHandler := s.ep.routes.match(m.Topic)
	if newHandler == nil {
		s.ep.stats.joinsRefused.Add(1)
		s.reply(Ref{}, m.Ref, m.Topic, statusError, reasonPayload(ReasonUnmatchedTopic))
		return
	}
	old := s.channel(m.Topic)
	if old == nil && s.channelCount() >= s.ep.cfg.MaxChannels {
		s.ep.stats.joinsRefused.Add(1)
		s.reply(m.JoinRef, m.Ref, m.Topic, statusError, reasonPayload(ReasonTooManyChannels))
		return
	}
	if old != nil {
		// The old instance stops now; its phx_close follows the new reply.
		s.forget(old)
		old.end(ReasonDuplicateJoin, "")
	}
	h := newHandler()
	ch := newChannel(s, m.Topic, m.JoinRef, h)
	tr.Emit("join.start", "socket", s.id, "topic", m.Topic, "join_ref", m.JoinRef.String())
	res, err := s.runJoin(h, ch, m.Payload)
	if err == nil {
		err = s.completeJoin(ch, m, res)
	}
	if err != nil {
		ch.end(ReasonSocketClosed, "")
		s.ep.stats.joinsRefused.Add(1)
		var p Payload
		if errors.Is(err, errJoinCrashed) {
			p = reasonPayload(ReasonJoinCrashed)
		} else {
			p = s.errorPayload("join", m.Topic, err)
		}
		s.reply(m.JoinRef, m.Ref, m.Topic, statusError, p)
	}
	if old != nil {
		if f, ferr := s.ser.EncodePush(old.joinRef, old.joinRef, old.topic, eventClose, Payload{}); ferr == nil {
			s.enqueue(f)
		}
	}
	tr.Emit("join.done", "socket", s.id, "topic", m.Topic, "join_ref", m.JoinRef.String(), "ok", err == nil)
}

var errJoinCrashed = errors.New("channels: join crashed")

// runJoin calls Handler.Join, turning a panic into errJoinCrashed.
func (s *Socket) runJoin(h Handler, ch *Channel, payload json.RawMessage) (res JoinResult, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.ep.log.Error("channel join panicked", zap.String("topic", ch.topic),
				zap.String("socket", s.id), zap.Any("panic", r), zap.Stack("stack"))
			err = errJoinCrashed
		}
	}()
	return h.Join(s.ctx, ch, payload)
}

// completeJoin writes the ok reply, the replay and the held frames, and
// registers the channel. A response or replay that cannot be encoded fails
// the join with {"reason":"internal"}.
func (s *Socket) completeJoin(ch *Channel, m *Message, res JoinResult) error {
	p, err := toPayload(res.Response)
	if err != nil {
		return fmt.Errorf("encode join response: %w", err)
	}
	reply, err := s.ser.EncodeReply(ch.joinRef, m.Ref, ch.topic, statusOK, p)
	if err != nil {
		return fmt.Errorf("encode join reply: %w", err)
	}
	then := make([]Frame, 0, len(res.Then))
	for _, push := range res.Then {
		pp, err := toPayload(push.Payload)
		if err != nil {
			return fmt.Errorf("encode join push %q: %w", push.Event, err)
		}
		f, err := s.ser.EncodePush(ch.joinRef, Ref{}, ch.topic, push.Event, pp)
		if err != nil {
			return fmt.Errorf("encode join push %q: %w", push.Event, err)
		}
		then = append(then, f)
	}
	s.setChannel(ch)
	s.ep.stats.joins.Add(1)
	s.ep.stats.channelsOpen.Add(1)
	if ch.joined(reply, then, res.Skip) {
		ch.Close()
	}
	return nil
}

// leave handles phx_leave (§3.6).
func (s *Socket) leave(m *Message) {
	ch := s.channel(m.Topic)
	if ch == nil {
		s.reply(m.JoinRef, m.Ref, m.Topic, statusOK, Payload{JSON: emptyObject})
		return
	}
	if !m.JoinRef.IsNull() && !m.JoinRef.Equal(ch.joinRef) {
		s.ep.cfg.Tracer.Emit("leave.stale", "socket", s.id, "topic", m.Topic, "join_ref", m.JoinRef.String())
		return
	}
	s.forget(ch)
	s.reply(ch.joinRef, m.Ref, m.Topic, statusOK, Payload{JSON: emptyObject})
	ch.end(ReasonLeave, eventClose)
}

// push handles any other event (§3.4, §3.5).
func (s *Socket) push(m *Message) {
	ch := s.channel(m.Topic)
	if ch == nil {
		s.reply(Ref{}, m.Ref, m.Topic, statusError, reasonPayload(ReasonUnmatchedTopic))
		return
	}
	if !m.JoinRef.IsNull() && !m.JoinRef.Equal(ch.joinRef) {
		s.ep.cfg.Tracer.Emit("push.stale", "socket", s.id, "topic", m.Topic, "join_ref", m.JoinRef.String())
		return
	}
	resp, err, crashed := s.runHandleIn(ch, m)
	if crashed {
		s.forget(ch)
		ch.end(ReasonCrash, eventError)
		return
	}
	switch {
	case err != nil:
		s.reply(ch.joinRef, m.Ref, m.Topic, statusError, s.errorPayload("handle_in", m.Topic, err))
	case resp != nil:
		p, perr := toPayload(resp)
		if perr != nil {
			p = s.errorPayload("handle_in", m.Topic, fmt.Errorf("encode response: %w", perr))
			s.reply(ch.joinRef, m.Ref, m.Topic, statusError, p)
			return
		}
		s.reply(ch.joinRef, m.Ref, m.Topic, statusOK, p)
	}
}

// runHandleIn calls HandleIn (or HandleBinary), recovering a panic.
func (s *Socket) runHandleIn(ch *Channel, m *Message) (resp any, err error, crashed bool) {
	defer func() {
		if r := recover(); r != nil {
			s.ep.log.Error("channel handler panicked", zap.String("topic", ch.topic),
				zap.String("event", m.Event), zap.String("socket", s.id), zap.Any("panic", r), zap.Stack("stack"))
			resp, err, crashed = nil, nil, true
		}
	}()
	if m.IsBinary() {
		bh, ok := ch.handler.(BinaryHandler)
		if !ok {
			return nil, &ReplyError{Reason: ReasonBinaryUnsupported}, false
		}
		resp, err = bh.HandleBinary(s.ctx, ch, m.Event, m.Binary)
		return resp, err, false
	}
	resp, err = ch.handler.HandleIn(s.ctx, ch, m.Event, m.Payload)
	return resp, err, false
}
