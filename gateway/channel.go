package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/relaygw/relay/channels"
	"github.com/relaygw/relay/session"
	"go.uber.org/zap"
)

// joinTimeout bounds the replay read of a join: a lost read blanks a view for a
// moment (recovered:false) and never blocks the socket for long.
const joinTimeout = 2 * time.Second

// sessionChannel handles "session:<id>" topics (docs/OWNERSHIP.md "Join (observe)").
type sessionChannel struct{ n *Node }

var _ channels.Handler = sessionChannel{}

// joinParams is the phx_join payload:
//
//	{"last_event":{"epoch":E,"seq":S}, "presence":true}
//
// Both are optional. presence opts the channel into presence tracking; it is
// opt-in because every tracked join sends the whole presence_state and a
// diff to every socket on the topic, which is quadratic on a topic with
// thousands of sockets.
type joinParams struct {
	LastEvent *session.Position `json:"last_event"`
	Presence  bool              `json:"presence"`
}

// joinReply is the ok reply of a session join.
type joinReply struct {
	Epoch     int64  `json:"epoch"`
	Seq       int64  `json:"seq"`
	Replayed  int    `json:"replayed"`
	Recovered bool   `json:"recovered"`
	Reason    string `json:"reason,omitempty"` // why recovered is false
	Node      string `json:"node"`
	Owner     string `json:"owner,omitempty"`
}

func replyErr(code, msg string) *channels.ReplyError {
	return &channels.ReplyError{Reason: code, Fields: map[string]any{"message": msg}}
}

func sessionID(topic string) string { return strings.TrimPrefix(topic, "session:") }

// Join authorizes the topic, subscribes the channel, then replays from the
// log. Live events that arrive while the join runs are held by the channel and
// dropped when at or before the last replayed position, so the seam has no
// gap and no duplicate.
func (h sessionChannel) Join(ctx context.Context, ch *channels.Channel, payload json.RawMessage) (channels.JoinResult, error) {
	n := h.n
	id := sessionID(ch.Topic())
	if !session.ValidID(id) {
		return channels.JoinResult{}, replyErr(CodeInvalidSessionID, "session id must be 1-128 characters of [A-Za-z0-9_.:-]")
	}
	claims, _ := ch.Socket().Assigns().(*Claims)
	if claims == nil || !claims.Allows(id) {
		return channels.JoinResult{}, replyErr(CodeUnauthorized, "the token does not allow this session")
	}
	if n.draining.Load() {
		return channels.JoinResult{}, replyErr(CodeDraining, "this node is draining; reconnect to another node")
	}
	var p joinParams
	if t := bytes.TrimSpace(payload); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		if err := json.Unmarshal(t, &p); err != nil {
			return channels.JoinResult{}, replyErr(CodeInvalidBody, "join payload must be {\"last_event\":{\"epoch\":E,\"seq\":S}}")
		}
	}

	n.expireAt(ch, claims)
	ch.Subscribe()

	ctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	reply := joinReply{Node: n.name, Recovered: true}
	var res channels.JoinResult
	if p.LastEvent == nil {
		st, owner := n.view(ctx, id)
		reply.Epoch, reply.Seq, reply.Owner = st.Epoch, st.Seq, owner
		res.Response = reply
		if p.Presence {
			res.Then = n.trackPresence(ch, claims)
		}
		return res, nil
	}
	last := *p.LastEvent
	events, complete, err := n.replay.Since(ctx, id, last, int(n.cfg.ReplayMaxLen))
	switch {
	case err != nil:
		n.log.Warn("replay read failed", zap.String("session", id), zap.Error(err))
		n.metrics.replayErrors.Inc()
		reply.Recovered, reply.Reason = false, "replay_unavailable"
	case !complete:
		reply.Recovered, reply.Reason = false, "replay_truncated"
	}
	for _, ev := range events {
		// Every event gets the next seq, so a forward jump means events the
		// log does not hold (appends lost while it was unreachable, or a
		// turn's final events an owner reserved and died before emitting):
		// the client must refetch, as when the log was trimmed.
		if ev.Seq > last.Seq+1 && reply.Recovered {
			reply.Recovered, reply.Reason = false, "replay_truncated"
		}
		b, err := json.Marshal(ev)
		if err != nil {
			continue
		}
		res.Then = append(res.Then, channels.Push{Event: ev.Type, Payload: b})
		last = ev.Pos()
	}
	n.metrics.replayed.Add(float64(len(events)))
	reply.Epoch, reply.Seq, reply.Replayed = last.Epoch, last.Seq, len(events)
	_, reply.Owner = n.owner(ctx, id)
	res.Response = reply
	if p.Presence {
		res.Then = append(res.Then, n.trackPresence(ch, claims)...)
	}
	cutoff := last
	if err == nil && !complete && len(events) == 0 {
		// The log neither reaches back to the cursor nor holds anything
		// after it: the cursor is ahead of the log (a restarted embedded
		// node, a wiped store), not behind. Every live event is news to
		// this client; dropping those up to its cursor would lose them.
		cutoff = session.Position{}
	}
	res.Skip = func(b *channels.Broadcast) bool {
		pos, ok := b.Meta.(session.Position)
		return ok && !cutoff.Less(pos)
	}
	return res, nil
}

// HandleIn takes a "message" push down the same path as an event POST.
func (h sessionChannel) HandleIn(ctx context.Context, ch *channels.Channel, event string, payload json.RawMessage) (any, error) {
	if event != "message" {
		return nil, replyErr("unknown_event", "session channels accept only \"message\" pushes")
	}
	id := sessionID(ch.Topic())
	in, err := DecodeInput(payload)
	if err != nil {
		return nil, asAPIError(err).pushReply()
	}
	acc, ae := h.n.submit(ctx, id, in)
	if ae != nil {
		return nil, ae.pushReply()
	}
	return acc, nil
}

// Terminate untracks the channel's presence (a presence_diff leave goes to
// the topic); the hub drops the channel's subscription itself.
func (h sessionChannel) Terminate(ch *channels.Channel, _ channels.CloseReason) {
	if ref, ok := h.n.presenceRef.LoadAndDelete(ch); ok {
		h.n.presence.Untrack(ch.Topic(), ref.(string))
	}
	if t, ok := h.n.expiries.LoadAndDelete(ch); ok {
		t.(*time.Timer).Stop()
	}
}

// expireAt closes the channel's socket (1001) when the token it joined with
// expires, so a socket never watches a session longer than its token allows;
// the client reconnects with a fresh token.
func (n *Node) expireAt(ch *channels.Channel, claims *Claims) {
	if claims.ExpiresAt == nil {
		return
	}
	sock := ch.Socket()
	n.expiries.Store(ch, time.AfterFunc(time.Until(claims.ExpiresAt.Time), func() {
		n.log.Debug("token expired: closing socket", zap.String("socket", sock.ID()))
		sock.Close(channels.CloseGoingAway)
	}))
}

// trackPresence tracks the joining channel under its token's subject (the
// socket id when the token has none) and returns the presence_state push the
// channel gets right after its join reply (docs/PHOENIX.md §5.3: a full
// state after every join). The join's own presence_diff follows it.
func (n *Node) trackPresence(ch *channels.Channel, claims *Claims) []channels.Push {
	key := claims.Subject
	if key == "" {
		key = "socket:" + ch.Socket().ID()
	}
	ref := n.presence.Track(ch.Topic(), key, map[string]any{"node": n.name, "online_at": time.Now().Unix()})
	n.presenceRef.Store(ch, ref)
	return []channels.Push{{Event: "presence_state", Payload: n.presence.List(ch.Topic())}}
}
