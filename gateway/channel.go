package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/channels"
	"github.com/relaygw/relay/presence"
	"github.com/relaygw/relay/session"
	"go.uber.org/zap"
)

// joinTimeout bounds the replay read of a join: a lost read blanks a view for a
// moment (recovered:false) and never blocks the socket for long.
const joinTimeout = 2 * time.Second

// sessionChannel handles one "session:<id>" channel (docs/OWNERSHIP.md
// "Join (observe)"). Every join gets a value of its own (Endpoint.HandleNew),
// so the channel's presence ref and token-expiry timer live here and go
// with the channel. Join and HandleIn run on the socket's reader goroutine;
// Terminate runs after the join completed (channels.Handler), so it sees
// what Join set.
type sessionChannel struct {
	n           *Node
	presenceRef string      // phx_ref of the channel's presence, "" when untracked
	expiry      *time.Timer // closes the socket at token expiry; nil without exp
}

var _ channels.Handler = (*sessionChannel)(nil)

// joinParams is the phx_join payload:
//
//	{"last_event":{"epoch":E,"seq":S}, "presence":true}
//
// Both are optional. A join is tracked in presence unless presence is
// false; presence diffs are batched per PRESENCE_BROADCAST_PERIOD and a
// topic above PRESENCE_MAX_LISTED presences is counted, not listed, so a
// tracked join costs one meta per period on a big topic, not a list.
type joinParams struct {
	LastEvent *agent.Position `json:"last_event"`
	Presence  *bool           `json:"presence"`
}

// errJoinPayload is the message of a join refused with invalid_body.
var errJoinPayload = errors.New(`join payload must be {"last_event":{"epoch":E,"seq":S},"presence":bool}, both optional, epoch and seq non-negative integers, no other keys`)

// decodeJoinParams decodes a phx_join payload. An empty or null payload is
// the default join; anything else must be an object of the documented keys
// only, with a last_event of non-negative epoch and seq, or it is refused
// (the join then changes nothing).
func decodeJoinParams(payload json.RawMessage) (joinParams, error) {
	var p joinParams
	t := bytes.TrimSpace(payload)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return p, nil
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return joinParams{}, errJoinPayload
	}
	if dec.More() {
		return joinParams{}, errJoinPayload
	}
	if p.LastEvent != nil && (p.LastEvent.Epoch < 0 || p.LastEvent.Seq < 0) {
		return joinParams{}, errJoinPayload
	}
	return p, nil
}

// tracked reports whether the join asks for presence (the default).
func (p joinParams) tracked() bool { return p.Presence == nil || *p.Presence }

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
func (h *sessionChannel) Join(ctx context.Context, ch *channels.Channel, payload json.RawMessage) (channels.JoinResult, error) {
	n := h.n
	id := sessionID(ch.Topic())
	if !agent.ValidID(id) {
		return channels.JoinResult{}, replyErr(CodeInvalidSessionID, "session id must be 1-128 characters of [A-Za-z0-9_.:-]")
	}
	claims, _ := ch.Socket().Assigns().(*Claims)
	if claims == nil || !claims.Allows(id) {
		return channels.JoinResult{}, replyErr(CodeUnauthorized, "the token does not allow this session")
	}
	if n.draining.Load() {
		return channels.JoinResult{}, replyErr(CodeDraining, "this node is draining; reconnect to another node")
	}
	p, err := decodeJoinParams(payload)
	if err != nil {
		return channels.JoinResult{}, replyErr(CodeInvalidBody, err.Error())
	}

	h.expireAt(ch, claims)
	// Live events carry the join_ref: once the client moved on to a newer
	// join of the topic (a rejoin after a join timeout), it drops every
	// frame of this one (docs/PHOENIX.md §3.3).
	ch.SubscribeWithJoinRef()

	// The join's reads are bounded by joinTimeout, not by the socket's
	// context: a context derived from the socket's long-lived one leaves a
	// children map and a Done channel behind on it (about 390 B for every
	// idle socket) after the join. A socket that closes while its join runs
	// waits out at most joinTimeout, and the reply is dropped with it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), joinTimeout)
	defer cancel()
	reply := joinReply{Node: n.name, Recovered: true}
	var res channels.JoinResult
	if p.LastEvent == nil {
		st, owner := n.view(ctx, id, session.HistoryQuery{Limit: 1})
		reply.Epoch, reply.Seq, reply.Owner = st.Epoch, st.Seq, owner
		res.Response = reply
		if p.tracked() {
			res.Then = h.trackPresence(ch, claims)
		}
		res.Skip = inOrder(agent.Position{})
		return res, nil
	}
	rr, err := session.Replay(ctx, n.replay, id, *p.LastEvent, int(n.cfg.ReplayMaxLen), n.sessionHead(id))
	if err != nil {
		n.log.Warn("replay read failed", zap.String("session", id), zap.Error(err))
		n.metrics.replayErrors.Inc()
	}
	reply.Recovered, reply.Reason = rr.Recovered, string(rr.Reason)
	for _, ev := range rr.Events {
		b, err := json.Marshal(ev)
		if err != nil {
			continue
		}
		res.Then = append(res.Then, channels.Push{Event: ev.Type, Payload: b})
	}
	n.metrics.replayed.Add(float64(len(rr.Events)))
	reply.Epoch, reply.Seq, reply.Replayed = rr.Top.Epoch, rr.Top.Seq, len(rr.Events)
	_, reply.Owner = n.owner(ctx, id)
	res.Response = reply
	if p.tracked() {
		res.Then = append(res.Then, h.trackPresence(ch, claims)...)
	}
	res.Skip = inOrder(rr.Skip)
	if !rr.Skip.IsZero() {
		n.sequence.Seed(ch.Topic(), rr.Skip)
	}
	return res, nil
}

// inOrder is a channel's JoinResult.Skip: it keeps the last session event
// position handed to the channel, starting at from (the replay seam,
// session.ReplayResult.Skip), and drops every event at or before it, so a
// socket never gets an event at or below one it already got for the
// session, whatever path the event took. The channel calls it under its
// own lock, one broadcast at a time. Broadcasts without a position
// (presence diffs) pass.
func inOrder(from agent.Position) func(*channels.Broadcast) bool {
	last := from
	return func(b *channels.Broadcast) bool {
		pos, ok := b.Meta.(agent.Position)
		if !ok {
			return false
		}
		if !last.Less(pos) {
			return true
		}
		last = pos
		return false
	}
}

// sessionHead is session id's authoritative position for the replay seam
// (session.SessionHead): the live actor's when it runs on this node, else
// the session store's. A store that cannot be read gives ok false.
func (n *Node) sessionHead(id string) session.SessionHead {
	return func(ctx context.Context) (agent.Position, bool) {
		st, err := n.manager.State(ctx, id, session.HistoryQuery{Limit: 1})
		if err != nil || st.Source == session.SourceUnavailable {
			return agent.Position{}, false
		}
		return agent.Position{Epoch: st.Epoch, Seq: st.Seq}, true
	}
}

// HandleIn takes a "message" push down the same path as an event POST, a
// "stop" push {"turn":"<epoch>-<seq>"} down the path of a stop POST, and a
// "resume" push {"interrupt","value"} down the path of an interrupt answer.
func (h *sessionChannel) HandleIn(ctx context.Context, ch *channels.Channel, event string, payload json.RawMessage) (any, error) {
	id := sessionID(ch.Topic())
	switch event {
	case "message":
	case "stop":
		turn, ae := decodeStopPush(payload)
		if ae == nil {
			var b stopBody
			if b, ae = h.n.stop(ctx, id, turn); ae == nil {
				return b, nil
			}
		}
		return nil, ae.pushReply()
	case "resume":
		return h.submitPush(ctx, id, payload, decodeResumePush)
	default:
		return nil, replyErr("unknown_event", "session channels accept only \"message\", \"stop\" and \"resume\" pushes")
	}
	return h.submitPush(ctx, id, payload, DecodeInput)
}

// submitPush decodes a push's payload into an input with decode and
// submits it to session id, answering as an event POST would (README
// "WebSocket API"): the acceptance, or the error reply.
func (h *sessionChannel) submitPush(ctx context.Context, id string, payload json.RawMessage, decode func([]byte) (agent.Input, error)) (any, error) {
	in, err := decode(payload)
	if err != nil {
		ae := asAPIError(err)
		h.n.metrics.refused.WithLabelValues(ae.Code).Inc()
		return nil, ae.pushReply()
	}
	acc, ae := h.n.submit(ctx, id, in)
	if ae != nil {
		return nil, ae.pushReply()
	}
	return acc, nil
}

// Terminate untracks the channel's presence (a presence_diff leave goes to
// the topic) and stops its token-expiry timer; the hub drops the channel's
// subscription itself.
func (h *sessionChannel) Terminate(ch *channels.Channel, _ channels.CloseReason) {
	if h.presenceRef != "" {
		h.n.presence.Untrack(ch.Topic(), h.presenceRef)
	}
	if h.expiry != nil {
		h.expiry.Stop()
	}
}

// expireAt closes the channel's socket (1001) when the token it joined with
// expires, so a socket never watches a session longer than its token allows;
// the client reconnects with a fresh token.
func (h *sessionChannel) expireAt(ch *channels.Channel, claims *Claims) {
	if claims.ExpiresAt == nil {
		return
	}
	sock, log := ch.Socket(), h.n.log
	h.expiry = time.AfterFunc(time.Until(claims.ExpiresAt.Time), func() {
		log.Debug("token expired: closing socket", zap.String("socket", sock.ID()))
		sock.Close(channels.CloseGoingAway)
	})
}

// trackPresence tracks the joining channel under its token's subject (the
// socket id when the token has none) and returns the presence_state push the
// channel gets right after its join reply (docs/PHOENIX.md §5.3: a full
// state after every join), cluster-wide; on a topic above
// PRESENCE_MAX_LISTED, presence_state {} and presence_count {"count":N}.
// The join's own presence_diff follows at the next broadcast period. Join
// subscribed the channel before this takes the state, so every change after
// it reaches the channel in a later diff, including the leave of a presence
// the state listed before its join was broadcast (presence.Replica.List).
func (h *sessionChannel) trackPresence(ch *channels.Channel, claims *Claims) []channels.Push {
	n := h.n
	key := claims.Subject
	if key == "" {
		key = "socket:" + ch.Socket().ID()
	}
	h.presenceRef = n.presence.Track(ch.Topic(), key, map[string]any{"node": n.name, "online_at": time.Now().Unix()})
	state, counted := n.presence.List(ch.Topic())
	pushes := []channels.Push{{Event: "presence_state", Payload: state}}
	if counted {
		pushes = append(pushes, channels.Push{Event: "presence_count", Payload: presence.CountPayload(n.presence.Count(ch.Topic()))})
	}
	return pushes
}
