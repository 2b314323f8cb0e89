package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/relaygw/relay/session"
	"go.uber.org/zap"
)

// Forwarding (docs/OWNERSHIP.md "Event (write)": "forward is an
// :erpc call to the owner"): a node that is not a session's owner sends the
// event to the owner over NATS request/reply on <cluster>.fwd.<node>. The
// owner runs the same Submit, which re-claims the lease before accepting.

// Forward error codes (see README "Error codes").
const (
	CodeForwardTimeout = "forward_timeout" // 504: the owner did not answer in time; the event may have been accepted
	CodeForwardFailed  = "forward_failed"  // 502: the owner answered with an error; the event may have been accepted
)

// forwardRequest is the NATS request body.
type forwardRequest struct {
	Session string        `json:"session"`
	Input   session.Input `json:"input"`
	Owner   string        `json:"owner"` // the holder the sender saw
}

// forwardReply is the owner's answer: Accepted, or an error code with the
// lease holder the owner saw (for a re-route) and, for retry directives, the
// holder's remaining time.
type forwardReply struct {
	Accepted    *acceptedBody   `json:"accepted,omitempty"`
	Error       string          `json:"error,omitempty"`
	Message     string          `json:"message,omitempty"`
	Retry       *RetryDirective `json:"retry,omitempty"`
	Holder      string          `json:"holder,omitempty"`
	RemainingMS int64           `json:"remaining_ms,omitempty"`
}

func forwardSubject(cluster, node string) string { return cluster + ".fwd." + node }

// nodeOf returns the node name of an owner identity "<node>/<incarnation>".
func nodeOf(owner string) string {
	name, _, _ := strings.Cut(owner, "/")
	return name
}

// serveForwards subscribes to this node's forward subject.
func (n *Node) serveForwards() error {
	sub, err := n.nc.Subscribe(forwardSubject(n.cfg.Cluster, n.name), func(msg *nats.Msg) {
		n.bg.Add(1)
		go n.handleForward(msg)
	})
	if err != nil {
		return fmt.Errorf("gateway: subscribe forwards: %w", err)
	}
	n.closers = append(n.closers, func() { _ = sub.Unsubscribe() })
	return nil
}

func (n *Node) handleForward(msg *nats.Msg) {
	defer n.bg.Done()
	var req forwardRequest
	var rep forwardReply
	if err := json.Unmarshal(msg.Data, &req); err != nil || !session.ValidID(req.Session) {
		rep.Error, rep.Message = CodeInvalidBody, "malformed forward request"
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ForwardTimeout)
		acc, err := n.submitLocal(ctx, req.Session, req.Input)
		cancel()
		var held *session.LeaseHeldError
		switch {
		case err == nil:
			rep.Accepted = &acc
		case errors.As(err, &held):
			ae := classify(err, n.cfg.LeaseTTL)
			rep.Error, rep.Message, rep.Retry = ae.Code, ae.Message, ae.Retry
			rep.Holder, rep.RemainingMS = held.Holder, held.Remaining.Milliseconds()
		default:
			ae := n.refusal(req.Session, err)
			rep.Error, rep.Message, rep.Retry = ae.Code, ae.Message, ae.Retry
		}
	}
	b, _ := json.Marshal(rep)
	if err := msg.Respond(b); err != nil {
		n.log.Debug("forward reply lost", zap.Error(err))
	}
}

// errUnreachable marks a hop whose owner could not be reached at all (no
// responders, connection lost): nothing ran there.
var errUnreachable = errors.New("gateway: owner unreachable")

// forward sends in to owner and returns its answer. An error wrapping
// errUnreachable means nothing reached the owner; a *apiError carries the
// owner's refusal or the forward_timeout code.
func (n *Node) forward(ctx context.Context, owner, id string, in session.Input) (acceptedBody, *session.LeaseHeldError, error) {
	if !n.nc.IsConnected() {
		// While reconnecting, nats.go buffers the request and sends it once
		// the link is back: the owner would run it long after this caller
		// gave up. Nothing is sent; the caller gets a retry directive.
		return acceptedBody{}, nil, fmt.Errorf("%w: nats %s", errUnreachable, n.nc.Status())
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ForwardTimeout)
	defer cancel()
	body, _ := json.Marshal(forwardRequest{Session: id, Input: in, Owner: owner})
	n.metrics.forwards.Inc()
	msg, err := n.nc.RequestWithContext(ctx, forwardSubject(n.cfg.Cluster, nodeOf(owner)), body)
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionDraining):
		return acceptedBody{}, nil, fmt.Errorf("%w: %w", errUnreachable, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return acceptedBody{}, nil, &apiError{Status: http.StatusGatewayTimeout, Code: CodeForwardTimeout,
			Message: "the owner node did not answer in time; the event may have been accepted"}
	case err != nil:
		return acceptedBody{}, nil, &apiError{Status: http.StatusBadGateway, Code: CodeForwardFailed,
			Message: "forwarding to the owner node failed: " + err.Error()}
	}
	var rep forwardReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return acceptedBody{}, nil, &apiError{Status: http.StatusBadGateway, Code: CodeForwardFailed, Message: "malformed reply from the owner node"}
	}
	if rep.Accepted != nil {
		return *rep.Accepted, nil, nil
	}
	if rep.Holder != "" {
		// The node we reached does not own the session (any more).
		return acceptedBody{}, &session.LeaseHeldError{Key: id, Holder: rep.Holder, Remaining: time.Duration(rep.RemainingMS) * time.Millisecond}, nil
	}
	if rep.Retry != nil {
		return acceptedBody{}, nil, &apiError{Status: http.StatusServiceUnavailable, Code: rep.Error, Message: rep.Message, Retry: rep.Retry}
	}
	status := http.StatusBadGateway
	switch rep.Error {
	case CodeSessionBusy:
		status = http.StatusTooManyRequests
	case CodeInvalidBody, CodeInvalidSessionID:
		status = http.StatusBadRequest
	}
	code := rep.Error
	if code == "" || code == CodeInternal {
		code = CodeForwardFailed
	}
	return acceptedBody{}, nil, &apiError{Status: status, Code: code, Message: "owner node: " + rep.Message}
}
