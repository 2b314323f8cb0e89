// Package natsforward is the NATS implementation of session.Forwarder:
// a forward is a NATS request to "<Prefix>.fwd.<node>" carrying a
// session.ForwardRequest as JSON, and the reply is a session.ForwardReply
// as JSON (docs/OWNERSHIP.md "Event (write)").
//
// A forward made under a recording OpenTelemetry span carries its W3C
// trace context (traceparent, tracestate) in the request's NATS headers;
// Serve extracts it, so the owner's spans join the sender's trace. Without
// a span the request has no headers.
//
// The sending side never sends while its NATS link is down: nats.go would
// buffer the request and deliver it once the link is back, long after the
// sender gave up, so the owner would run an input its client was told to
// re-send. Such a forward answers session.ErrUnreachable at once.
package natsforward

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/relaygw/relay/session"
)

// Config configures a Forwarder.
type Config struct {
	// Prefix starts every subject (the cluster name). Required.
	Prefix string
	// Node is this node's name: Serve answers on Subject(Prefix, Node).
	// Required for Serve.
	Node string
	// Logger gets lost replies at debug level. Default: no logging.
	Logger *zap.Logger
}

// Subject is the subject a node receives forwards on: "<prefix>.fwd.<node>".
func Subject(prefix, node string) string { return prefix + ".fwd." + node }

// ControlSubject is the subject a node receives forwarded controls on
// (session.ForwardRequest with Control): "<prefix>.ctl.<node>". A node of
// a version without controls does not listen there, so a control sent to
// it finds no responders (session.ErrUnreachable) instead of being taken
// for an input.
func ControlSubject(prefix, node string) string { return prefix + ".ctl." + node }

// Forwarder sends and serves forwards over one NATS connection. It does
// not own the connection.
type Forwarder struct {
	nc  *nats.Conn
	cfg Config
	log *zap.Logger
	wg  sync.WaitGroup // requests being handled by Serve
}

var _ session.Forwarder = (*Forwarder)(nil)

// New returns a Forwarder over nc. It panics without a Prefix.
func New(nc *nats.Conn, cfg Config) *Forwarder {
	if cfg.Prefix == "" {
		panic("natsforward: Config.Prefix is required")
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return &Forwarder{nc: nc, cfg: cfg, log: log}
}

// Forward sends req to the node of holder and waits for its reply until ctx
// ends. Errors (see session.Forwarder): session.ErrUnreachable when the link
// is down, nobody listens on the node's subject, the connection closed or
// the holder's node name cannot be a subject token; session.ErrForwardTimeout
// at ctx's deadline; a *session.RemoteError for the node's error answer;
// session.ErrForwardFailed for another NATS error or a malformed reply;
// ctx's error when ctx was cancelled.
func (f *Forwarder) Forward(ctx context.Context, holder string, req session.ForwardRequest) (session.Accepted, error) {
	node := session.NodeOf(holder)
	if !validToken(node) {
		return session.Accepted{}, fmt.Errorf("natsforward: holder %q is no node of a cluster: %w", holder, session.ErrUnreachable)
	}
	if !f.nc.IsConnected() {
		return session.Accepted{}, fmt.Errorf("natsforward: nats %s: %w", f.nc.Status(), session.ErrUnreachable)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return session.Accepted{}, fmt.Errorf("natsforward: encode request: %w", err)
	}
	subject := Subject(f.cfg.Prefix, node)
	if req.Control != nil {
		subject = ControlSubject(f.cfg.Prefix, node)
	}
	out := &nats.Msg{Subject: subject, Data: body}
	if oteltrace.SpanContextFromContext(ctx).IsValid() {
		out.Header = nats.Header{}
		propagator.Inject(ctx, headerCarrier(out.Header))
	}
	msg, err := f.nc.RequestMsgWithContext(ctx, out)
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionDraining):
		return session.Accepted{}, fmt.Errorf("natsforward: forward to %s: %w: %w", node, session.ErrUnreachable, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return session.Accepted{}, fmt.Errorf("natsforward: forward to %s: %w: %w", node, session.ErrForwardTimeout, err)
	case errors.Is(err, context.Canceled):
		return session.Accepted{}, err
	case err != nil:
		return session.Accepted{}, fmt.Errorf("natsforward: forward to %s: %w: %w", node, session.ErrForwardFailed, err)
	}
	var rep session.ForwardReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return session.Accepted{}, fmt.Errorf("natsforward: forward to %s: %w: malformed reply: %w", node, session.ErrForwardFailed, err)
	}
	return rep.Result()
}

// Serve answers forwards to this node (Subject(Prefix, Node), and controls
// on ControlSubject(Prefix, Node)) with h, each
// on its own goroutine. A request that is not a JSON ForwardRequest is
// answered with session.CodeBadRequest. stop unsubscribes and waits for
// the requests being handled; once it returns, the server knows the node
// stopped listening, so a forward to it finds no responders (it does not
// wait out its timeout).
func (f *Forwarder) Serve(h session.ForwardHandler) (stop func(), err error) {
	if !validToken(f.cfg.Node) {
		return nil, fmt.Errorf("natsforward: node name %q is not a subject token", f.cfg.Node)
	}
	handle := func(msg *nats.Msg) {
		f.wg.Add(1)
		go f.handle(h, msg)
	}
	sub, err := f.nc.Subscribe(Subject(f.cfg.Prefix, f.cfg.Node), handle)
	if err != nil {
		return nil, fmt.Errorf("natsforward: subscribe: %w", err)
	}
	ctl, err := f.nc.Subscribe(ControlSubject(f.cfg.Prefix, f.cfg.Node), handle)
	if err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("natsforward: subscribe: %w", err)
	}
	// Let the server register the interest before the node is reachable.
	if err := f.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		_ = ctl.Unsubscribe()
		return nil, fmt.Errorf("natsforward: subscribe: %w", err)
	}
	return func() {
		_ = sub.Unsubscribe()
		_ = ctl.Unsubscribe()
		if f.nc.IsConnected() {
			_ = f.nc.Flush()
		}
		f.wg.Wait()
	}, nil
}

func (f *Forwarder) handle(h session.ForwardHandler, msg *nats.Msg) {
	defer f.wg.Done()
	var req session.ForwardRequest
	var rep session.ForwardReply
	if err := json.Unmarshal(msg.Data, &req); err != nil {
		rep.Error = &session.RemoteError{Code: session.CodeBadRequest, Message: "malformed forward request: " + err.Error()}
	} else {
		ctx := context.Background()
		if msg.Header != nil {
			ctx = propagator.Extract(ctx, headerCarrier(msg.Header))
		}
		rep = h.HandleForward(ctx, req)
	}
	b, err := json.Marshal(rep)
	if err == nil {
		err = msg.Respond(b)
	}
	if err != nil {
		f.log.Debug("forward reply lost", zap.Error(err))
	}
}

// propagator carries the W3C trace context (traceparent, tracestate) over
// a forward hop.
var propagator = propagation.TraceContext{}

// headerCarrier adapts NATS headers to the propagator (keys as given, no
// canonicalisation: "traceparent").
type headerCarrier nats.Header

func (c headerCarrier) Get(key string) string { return nats.Header(c).Get(key) }
func (c headerCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }
func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// validToken reports whether s can be one NATS subject token.
func validToken(s string) bool {
	return s != "" && !strings.ContainsAny(s, ".*> \t\r\n")
}
