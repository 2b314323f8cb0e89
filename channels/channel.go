package channels

import (
	"fmt"
	"sync"

	"go.uber.org/zap"
)

type chanState uint8

const (
	stateJoining chanState = iota
	stateJoined
	stateClosed
)

// Channel is one joined topic on one socket (one join_ref). Methods are safe
// for concurrent use.
type Channel struct {
	sock    *Socket
	topic   string
	joinRef Ref
	handler Handler

	subMu      sync.Mutex // serializes Hub subscribe/unsubscribe of this channel
	subscribed bool       // guarded by subMu
	// withJoinRef: broadcasts reach this channel as pushes carrying its
	// join_ref (SubscribeWithJoinRef). Set before the subscription, read
	// by the Hub under its shard lock.
	withJoinRef bool
	hubIdx      int // position in the topic's subscriber list; guarded by the hub shard lock

	mu          sync.Mutex
	state       chanState
	held        []heldFrame             // frames that arrived while joining
	replay      *replayJob              // the join's replay, while the writer has it
	skip        func(b *Broadcast) bool // JoinResult.Skip, kept for later broadcasts
	closeOnJoin bool                    // Close was called while joining
}

// heldFrame is a frame waiting for the join reply. b is non-nil for
// broadcasts (filtered by JoinResult.Skip) and nil for pushes.
type heldFrame struct {
	f Frame
	b *Broadcast
}

func newChannel(s *Socket, topic string, joinRef Ref, h Handler) *Channel {
	return &Channel{sock: s, topic: topic, joinRef: joinRef, handler: h}
}

// Topic returns the channel's topic.
func (ch *Channel) Topic() string { return ch.topic }

// JoinRef returns the join_ref value of the join that created the channel.
func (ch *Channel) JoinRef() string { return ch.joinRef.String() }

// Socket returns the channel's socket.
func (ch *Channel) Socket() *Socket { return ch.sock }

// Subscribe subscribes the channel to its topic on the Hub. Broadcasts that
// arrive before the join reply is written are held and then filtered with
// JoinResult.Skip; the subscription ends with the channel. Calling it again,
// or after the channel ended, does nothing.
func (ch *Channel) Subscribe() {
	ch.subMu.Lock()
	defer ch.subMu.Unlock()
	if ch.subscribed || ch.isClosed() {
		return
	}
	ch.sock.ep.hub.subscribe(ch)
	ch.subscribed = true
}

// SubscribeWithJoinRef is Subscribe, except that the topic's broadcasts
// reach this channel as pushes carrying its join_ref
// ([join_ref, null, topic, event, payload]) instead of [null, null, ...].
// The phoenix client drops a frame whose join_ref is not its channel's
// current one (docs/PHOENIX.md §3.7), so once the client moved on to a
// newer join of the topic, or marked the channel errored after a join
// timeout, nothing of this channel reaches its application. The Hub still
// encodes each frame once per serializer and join_ref in use.
func (ch *Channel) SubscribeWithJoinRef() {
	ch.subMu.Lock()
	if !ch.subscribed {
		ch.withJoinRef = true
	}
	ch.subMu.Unlock()
	ch.Subscribe()
}

func (ch *Channel) unsubscribe() {
	ch.subMu.Lock()
	defer ch.subMu.Unlock()
	if ch.subscribed {
		ch.sock.ep.hub.unsubscribe(ch)
		ch.subscribed = false
	}
}

func (ch *Channel) isClosed() bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.state == stateClosed
}

// Push sends [join_ref, null, topic, event, payload] to this channel's client.
// Payload types are those of Push.Payload. While the channel is joining the
// push is held and written after the join reply. It returns ErrChannelClosed
// after the channel ended and ErrSocketClosed when the socket is closing.
func (ch *Channel) Push(event string, payload any) error {
	p, err := toPayload(payload)
	if err != nil {
		return fmt.Errorf("channels: push %q on %s: %w", event, ch.topic, err)
	}
	f, err := ch.sock.ser.EncodePush(ch.joinRef, Ref{}, ch.topic, event, p)
	if err != nil {
		return fmt.Errorf("channels: push %q on %s: %w", event, ch.topic, err)
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	switch ch.state {
	case stateJoining:
		ch.held = append(ch.held, heldFrame{f: f})
		return nil
	case stateJoined:
		if !ch.sock.enqueue(f) {
			return ErrSocketClosed
		}
		return nil
	default:
		return ErrChannelClosed
	}
}

// Broadcast sends a broadcast to every local subscriber of the channel's
// topic (this channel included when subscribed); see Hub.Broadcast.
func (ch *Channel) Broadcast(event string, payload []byte, meta any) int {
	return ch.sock.ep.hub.Broadcast(ch.topic, event, payload, meta)
}

// Close ends the channel from the server side: phx_close with its join_ref is
// sent, the client does not rejoin, Terminate runs (on the caller's
// goroutine) with ReasonServerClose. Called during Join, it takes effect right
// after the join reply. Idempotent.
func (ch *Channel) Close() {
	ch.mu.Lock()
	if ch.state == stateJoining {
		ch.closeOnJoin = true
		ch.mu.Unlock()
		return
	}
	ch.mu.Unlock()
	ch.sock.forget(ch)
	ch.end(ReasonServerClose, eventClose)
}

// deliver hands a broadcast frame to the channel; false means it was not
// taken (channel ended, socket closing or overflowing).
func (ch *Channel) deliver(f Frame, b *Broadcast) bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	switch ch.state {
	case stateJoining:
		if len(ch.held) >= ch.sock.ep.cfg.QueueSize {
			ch.sock.closeWith(CloseSlowConsumer, CloseSlowConsumer.String())
			return false
		}
		ch.held = append(ch.held, heldFrame{f: f, b: b})
		ch.sock.ep.cfg.Tracer.Emit("channel.held", "topic", ch.topic, "join_ref", ch.joinRef.String())
		return true
	case stateJoined:
		if b != nil && ch.skip != nil && ch.skip(b) {
			ch.sock.ep.cfg.Tracer.Emit("channel.skipped", "topic", ch.topic, "join_ref", ch.joinRef.String())
			return false
		}
		return ch.sock.enqueue(f)
	default:
		return false
	}
}

// joined writes the join reply, res.Then and the held frames, in that
// order, and opens the channel to live frames. It reports whether Close was
// called during the join. res.Then is a replay: it takes one entry of the
// socket's queue and the writer paces it out (Socket.enqueueReplay), so a
// replay larger than QueueSize or QueueBytes reaches a client that reads.
func (ch *Channel) joined(reply Frame, then []Frame, skip func(*Broadcast) bool) (closeNow bool) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.sock.enqueue(reply)
	if len(then) > 0 {
		ch.replay = ch.sock.enqueueReplay(then)
	}
	for _, h := range ch.held {
		if h.b != nil && skip != nil && skip(h.b) {
			ch.sock.ep.cfg.Tracer.Emit("channel.skipped", "topic", ch.topic, "join_ref", ch.joinRef.String())
			continue
		}
		ch.sock.enqueue(h.f)
	}
	ch.held = nil
	ch.skip = skip
	ch.state = stateJoined
	return ch.closeOnJoin
}

// end closes the channel once: it stops delivery, optionally enqueues a
// phx_close or phx_error (notify is the event, "" for none), drops the
// subscription and, if the channel had joined, calls Terminate.
func (ch *Channel) end(reason CloseReason, notify string) {
	ch.mu.Lock()
	prev := ch.state
	if prev == stateClosed {
		ch.mu.Unlock()
		return
	}
	ch.state = stateClosed
	ch.held = nil
	if ch.replay != nil {
		ch.replay.drop() // the rest of the replay is for a join that ended
		ch.replay = nil
	}
	if notify != "" {
		var p Payload
		if notify == eventError {
			p = JSONPayload(crashPayload)
		}
		if f, err := ch.sock.ser.EncodePush(ch.joinRef, ch.joinRef, ch.topic, notify, p); err == nil {
			ch.sock.enqueue(f)
		}
	}
	ch.mu.Unlock()
	ch.unsubscribe()
	ch.sock.ep.cfg.Tracer.Emit("channel.end", "topic", ch.topic, "join_ref", ch.joinRef.String(), "reason", string(reason))
	if prev == stateJoined {
		ch.sock.ep.stats.channelsOpen.Add(-1)
		ch.terminate(reason)
	}
}

var crashPayload = []byte(`{"reason":"channel_crash"}`)

func (ch *Channel) terminate(reason CloseReason) {
	defer func() {
		if r := recover(); r != nil {
			ch.sock.ep.log.Error("channel terminate panicked",
				zap.String("topic", ch.topic), zap.Any("panic", r))
		}
	}()
	ch.handler.Terminate(ch, reason)
}
