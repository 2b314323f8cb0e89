// Package natstransport carries Muster's traffic over NATS. It implements
// muster.Transport.
//
// Subjects, for a Config{Prefix, Scope, Node}:
//
//	<prefix>.<scope>.node.<node>   the node's inbox: Send and Call requests
//	<prefix>.<scope>.bcast         Broadcast to every node of the scope
//
// Every message carries its sender's node name in the Relay-From header; a
// node ignores its own broadcasts. A Call is a NATS request on the target's
// inbox; a handler error comes back as a reply with the Relay-Status header
// set to "error", the error's muster.Code in Relay-Error-Code and the error
// message as data.
//
// Both subscriptions feed one queue that a single goroutine drains, so
// messages from one sender arrive in send order whatever their subject, and
// a Call's handler starts only after every message that arrived before it was
// handled. Each Call's handler runs on a goroutine of its own. When the queue
// (Config.QueueLen) is full NATS drops the message as a slow consumer; the
// transport is best effort, as muster.Transport allows.
//
// The caller owns the *nats.Conn. nats.go re-creates subscriptions after a
// reconnect, so a transport keeps working across server restarts; messages
// published while disconnected are buffered by nats.go up to its reconnect
// buffer size.
package natstransport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/relaygw/relay/internal/trace"
	"github.com/relaygw/relay/muster"
)

// Header names and values.
const (
	// HeaderFrom holds the sender's node name on every message and reply.
	HeaderFrom = "Relay-From"
	// HeaderStatus is "error" on a Call reply that carries a handler
	// error; the reply's data is then the error message.
	HeaderStatus = "Relay-Status"
	// HeaderErrorCode is the muster.Code of the handler error on a Call
	// reply whose HeaderStatus is "error" (absent for an error without a
	// code).
	HeaderErrorCode = "Relay-Error-Code"
	statusError     = "error"
)

// Errors returned by natstransport.
var (
	// ErrNoHandler is returned by Start when Register was not called.
	ErrNoHandler = errors.New("natstransport: no handler registered")
	// ErrAlreadyStarted is returned by a second Start.
	ErrAlreadyStarted = errors.New("natstransport: transport already started")
	// ErrBadName is returned by Start when Prefix, Scope or Node is empty or
	// not a single NATS subject token (no '.', '*', '>' or white space).
	ErrBadName = errors.New("natstransport: bad subject name")
)

// Config configures a Transport.
type Config struct {
	// Prefix is the cluster's subject prefix (one or more tokens joined by
	// '.'). Required.
	Prefix string
	// Scope is the Muster scope (one token). Required.
	Scope string
	// Node is this node's name (one token). Required.
	Node string
	// QueueLen bounds inbound messages waiting for the handler. Zero means
	// DefaultQueueLen.
	QueueLen int
	// Logger receives warnings about malformed messages. Nil means
	// zap.NewNop().
	Logger *zap.Logger
	// Tracer receives the trace points natstransport.deliver and
	// natstransport.handled (from, to, kind "msg" or "call"). Nil is free.
	Tracer *trace.Tracer
}

// DefaultQueueLen is the inbound queue length when Config.QueueLen is zero.
const DefaultQueueLen = 8192

// Transport is one node's Muster transport over NATS.
type Transport struct {
	nc  *nats.Conn
	cfg Config
	log *zap.Logger
	tr  *trace.Tracer

	inbox, bcast string

	mu      sync.Mutex
	handler muster.Handler
	started bool
	closed  bool
	subs    []*nats.Subscription

	queue  chan *nats.Msg
	quit   chan struct{}
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
}

var _ muster.Transport = (*Transport)(nil)

// New returns a transport for cfg.Node on nc. It does not subscribe until
// Start.
func New(nc *nats.Conn, cfg Config) *Transport {
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = DefaultQueueLen
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Transport{
		nc:     nc,
		cfg:    cfg,
		log:    log.With(zap.String("node", cfg.Node)),
		tr:     cfg.Tracer,
		inbox:  InboxSubject(cfg.Prefix, cfg.Scope, cfg.Node),
		bcast:  BroadcastSubject(cfg.Prefix, cfg.Scope),
		quit:   make(chan struct{}),
		ctx:    ctx,
		cancel: cancel,
	}
}

// InboxSubject returns "<prefix>.<scope>.node.<node>".
func InboxSubject(prefix, scope, node string) string {
	return prefix + "." + scope + ".node." + node
}

// BroadcastSubject returns "<prefix>.<scope>.bcast".
func BroadcastSubject(prefix, scope string) string {
	return prefix + "." + scope + ".bcast"
}

// validToken reports whether s is one non-empty NATS subject token.
func validToken(s string) bool {
	return s != "" && !strings.ContainsAny(s, ".*> \t\r\n")
}

func validPrefix(s string) bool {
	for tok := range strings.SplitSeq(s, ".") {
		if !validToken(tok) {
			return false
		}
	}
	return true
}

// Self returns the node's name.
func (t *Transport) Self() string { return t.cfg.Node }

// Register installs the inbound handler. Call it before Start.
func (t *Transport) Register(h muster.Handler) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.handler = h
}

// StartTimeout bounds Start's wait for the server when ctx has no deadline.
const StartTimeout = 5 * time.Second

// Start subscribes to the node's inbox and the scope's broadcast subject and
// waits until the server has processed the subscriptions (or ctx ends, or
// StartTimeout passes when ctx has no deadline), so a message published
// after Start returns reaches this node.
func (t *Transport) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("natstransport: start %q: %w", t.cfg.Node, err)
		}
	}()
	if !validPrefix(t.cfg.Prefix) || !validToken(t.cfg.Scope) || !validToken(t.cfg.Node) {
		return fmt.Errorf("%w: prefix %q scope %q node %q", ErrBadName, t.cfg.Prefix, t.cfg.Scope, t.cfg.Node)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return muster.ErrTransportClosed
	case t.handler == nil:
		return ErrNoHandler
	case t.started:
		return ErrAlreadyStarted
	}
	t.queue = make(chan *nats.Msg, t.cfg.QueueLen)
	for _, subj := range []string{t.inbox, t.bcast} {
		sub, err := t.nc.ChanSubscribe(subj, t.queue)
		if err != nil {
			t.unsubscribeLocked()
			return fmt.Errorf("subscribe %s: %w", subj, err)
		}
		t.subs = append(t.subs, sub)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, StartTimeout)
		defer cancel()
	}
	if err := t.nc.FlushWithContext(ctx); err != nil {
		t.unsubscribeLocked()
		return fmt.Errorf("flush subscriptions: %w", err)
	}
	t.started = true
	t.wg.Add(1)
	go t.dispatch(t.handler)
	return nil
}

func (t *Transport) unsubscribeLocked() {
	for _, s := range t.subs {
		_ = s.Unsubscribe()
	}
	t.subs = nil
}

func (t *Transport) msg(subject string, data []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set(HeaderFrom, t.cfg.Node)
	m.Data = data
	return m
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// Broadcast publishes msg on the scope's broadcast subject. Every other
// started node of the scope receives it; this node ignores it.
func (t *Transport) Broadcast(ctx context.Context, msg []byte) error {
	if err := t.publishCheck(ctx); err != nil {
		return fmt.Errorf("natstransport: broadcast from %q: %w", t.cfg.Node, err)
	}
	if err := t.nc.PublishMsg(t.msg(t.bcast, msg)); err != nil {
		return fmt.Errorf("natstransport: broadcast from %q: %w", t.cfg.Node, err)
	}
	return nil
}

// Send publishes msg on node to's inbox. Nobody listening is not an error.
func (t *Transport) Send(ctx context.Context, to string, msg []byte) error {
	if err := t.publishCheck(ctx); err != nil {
		return fmt.Errorf("natstransport: send %q to %q: %w", t.cfg.Node, to, err)
	}
	if !validToken(to) {
		return fmt.Errorf("natstransport: send %q to %q: %w", t.cfg.Node, to, ErrBadName)
	}
	if err := t.nc.PublishMsg(t.msg(InboxSubject(t.cfg.Prefix, t.cfg.Scope, to), msg)); err != nil {
		return fmt.Errorf("natstransport: send %q to %q: %w", t.cfg.Node, to, err)
	}
	return nil
}

func (t *Transport) publishCheck(ctx context.Context) error {
	if t.isClosed() {
		return muster.ErrTransportClosed
	}
	return ctx.Err()
}

// Call sends req as a NATS request to node to's inbox and waits for the
// reply until ctx ends. No subscriber on the inbox gives
// muster.ErrNoResponders; a handler error gives a *muster.RemoteError; a
// timeout gives ctx's error, and the remote handler may still run.
func (t *Transport) Call(ctx context.Context, to string, req []byte) ([]byte, error) {
	if err := t.publishCheck(ctx); err != nil {
		return nil, fmt.Errorf("natstransport: call %q to %q: %w", t.cfg.Node, to, err)
	}
	if !validToken(to) {
		return nil, fmt.Errorf("natstransport: call %q to %q: %w", t.cfg.Node, to, ErrBadName)
	}
	resp, err := t.nc.RequestMsgWithContext(ctx, t.msg(InboxSubject(t.cfg.Prefix, t.cfg.Scope, to), req))
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("natstransport: call %q to %q: %w", t.cfg.Node, to, muster.ErrNoResponders)
	case err != nil:
		return nil, fmt.Errorf("natstransport: call %q to %q: %w", t.cfg.Node, to, err)
	}
	if resp.Header.Get(HeaderStatus) == statusError {
		return nil, &muster.RemoteError{Code: muster.Code(resp.Header.Get(HeaderErrorCode)), Message: string(resp.Data)}
	}
	return resp.Data, nil
}

// Close unsubscribes, waits (up to StartTimeout) until the server has
// processed that, and waits for running handler calls to return. It does not
// close the NATS connection. It must not be called from this
// transport's own handler.
func (t *Transport) Close() error {
	t.mu.Lock()
	if !t.closed {
		t.closed = true
		t.unsubscribeLocked()
		t.cancel()
		close(t.quit)
	}
	t.mu.Unlock()
	// Let the server drop the interest before returning, so a Call made
	// after Close sees no responders instead of timing out.
	if t.nc.IsConnected() {
		_ = t.nc.FlushTimeout(StartTimeout)
	}
	t.wg.Wait()
	return nil
}

// dispatch hands queued messages to h until Close.
func (t *Transport) dispatch(h muster.Handler) {
	defer t.wg.Done()
	for {
		select {
		case <-t.quit:
			return
		case m := <-t.queue:
			t.handle(h, m)
		}
	}
}

func (t *Transport) handle(h muster.Handler, m *nats.Msg) {
	from := m.Header.Get(HeaderFrom)
	if from == "" {
		t.log.Warn("natstransport: message without sender", zap.String("subject", m.Subject))
		return
	}
	if m.Subject == t.bcast && from == t.cfg.Node {
		return
	}
	if m.Reply == "" {
		t.tr.Emit("natstransport.deliver", "from", from, "to", t.cfg.Node, "kind", "msg")
		h.HandleMessage(from, m.Data)
		t.tr.Emit("natstransport.handled", "from", from, "to", t.cfg.Node, "kind", "msg")
		return
	}
	t.wg.Add(1)
	go t.serveCall(h, from, m)
}

func (t *Transport) serveCall(h muster.Handler, from string, m *nats.Msg) {
	defer t.wg.Done()
	t.tr.Emit("natstransport.deliver", "from", from, "to", t.cfg.Node, "kind", "call")
	resp, err := h.HandleCall(t.ctx, from, m.Data)
	t.tr.Emit("natstransport.handled", "from", from, "to", t.cfg.Node, "kind", "call")
	reply := nats.NewMsg(m.Reply)
	reply.Header.Set(HeaderFrom, t.cfg.Node)
	reply.Data = resp
	if err != nil {
		reply.Header.Set(HeaderStatus, statusError)
		if code := muster.ErrorCode(err); code != "" {
			reply.Header.Set(HeaderErrorCode, string(code))
		}
		reply.Data = []byte(err.Error())
	}
	if err := t.nc.PublishMsg(reply); err != nil {
		t.log.Debug("natstransport: reply lost", zap.String("to", from), zap.Error(err))
	}
}
