package channels

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/relaygw/relay/internal/trace"
	"go.uber.org/zap"
)

// ConnectFunc authorizes a connection before the upgrade. params are the
// query parameters; authToken is the token from the
// "base64url.bearer.phx.<token>" subprotocol entry, or else the "token" query
// parameter ("" when neither). A non-nil error refuses with HTTP 403. assigns
// is available as Socket.Assigns.
type ConnectFunc func(r *http.Request, params url.Values, authToken string) (assigns any, err error)

// EndpointConfig configures an Endpoint. Zero fields take the defaults of
// DefaultEndpointConfig.
type EndpointConfig struct {
	// Hub is the topic registry channels subscribe to. Nil means a new Hub.
	Hub *Hub
	// Connect authorizes connections; nil accepts all with nil assigns.
	Connect ConnectFunc
	// Admit, when set, is asked before every new socket (a WebSocket
	// upgrade, a new LongPoll session), after the draining check and before
	// the Origin check and Connect. A non-nil Refusal refuses the socket
	// with it (see Refusal); sockets already open are not affected.
	Admit func(r *http.Request) *Refusal
	// Draining, when set, builds the answer to a new socket (a WebSocket
	// upgrade, a new LongPoll session) while the endpoint drains, so it can
	// carry a retry directive and Retry-After; nil (or a nil Refusal)
	// answers 503 {"error":"draining","message":"the node is draining"}.
	Draining func(r *http.Request) *Refusal
	// AllowedOrigins are Origin patterns accepted besides same-host and
	// missing Origin (see originAllowed): "example.com", "*.example.com",
	// "example.com:8080", "https://*.example.com".
	AllowedOrigins []string
	// HeartbeatTimeout closes (1001) a socket that sends nothing for this
	// long. Default 60 s (Phoenix's idle timeout; clients send a heartbeat
	// every 30 s). One sweep per endpoint checks every socket each
	// sweepPeriod (a second, or a quarter of the timeout when that is
	// shorter), so a silent socket is closed within that period after the
	// timeout; no socket holds a timer of its own.
	HeartbeatTimeout time.Duration
	// MaxFrameBytes is the largest inbound frame; larger closes with 1009.
	// Default 64 KiB.
	MaxFrameBytes int64
	// MaxChannels is the most channels one socket may join. Default 100
	// (Phoenix max_channels_per_transport).
	MaxChannels int
	// QueueSize is the most frames queued for one socket before it is cut as
	// a slow consumer (1013). Default 1024.
	QueueSize int
	// QueueBytes is the most bytes queued for one socket before it is cut as
	// a slow consumer. Default 4 MiB.
	QueueBytes int
	// QueueMaxLag cuts a socket as a slow consumer (1013) once the oldest
	// frame of its outbound backlog has waited this long: a reader that
	// keeps reading, but slower than frames arrive, is cut before its
	// replies grow stale, not only a stuck one. The backlog's age is
	// measured from when the queue last went from empty to non-empty and is
	// checked by the writer before each write. Default 10 s; negative
	// disables.
	QueueMaxLag time.Duration
	// UnsentBytes is the most bytes the kernel may hold unsent for each
	// accepted TCP connection (TCP_NOTSENT_LOWAT, Linux): writes beyond it
	// wait in the socket's own queue, where heartbeat replies pass them and
	// QueueMaxLag sees them, instead of in a kernel buffer that autotuning
	// can grow to megabytes. Bytes in flight (the client's receive window)
	// are not limited, so a fast reader's throughput is not. Default 16 KiB;
	// negative leaves the system default.
	UnsentBytes int
	// WriteTimeout bounds one batch write to a transport; a write that
	// times out cuts the socket as a slow consumer (1013). It also bounds
	// the write of the close frame. Default 10 s.
	WriteTimeout time.Duration
	// WriteCoalesce is the adaptive coalescing interval: a socket that
	// gets a frame while idle is written at once; one that wrote within the
	// last WriteCoalesce waits for the next flush tick (at most
	// WriteCoalesce), so the frames that follow (a burst of streamed deltas,
	// a fan-out of several events) go out in one write. Default 2 ms;
	// negative disables (every frame is written as soon as a writer is
	// free).
	WriteCoalesce time.Duration
	// WriteDelay (deprecated) delays every socket, idle or not, to the next
	// flush tick of a WriteDelay interval: WriteCoalesce=WriteDelay that
	// also holds idle sockets. It adds up to WriteDelay of latency to every
	// message. Zero: WriteCoalesce alone applies.
	WriteDelay time.Duration
	// DrainBatch is the most sockets Shutdown closes at once: it closes them
	// in batches spaced evenly over half of the time its context has left
	// (drainSpacing without a deadline), so clients do not all reconnect in
	// the same instant. Default 500; a batch grows when more batches than
	// the time allows would be needed at drainMinGap apart.
	DrainBatch int
	// Logger; nil means zap.NewNop().
	Logger *zap.Logger
	// Tracer receives trace points (nil: none).
	Tracer *trace.Tracer
}

// Refusal is the answer to a new socket that EndpointConfig.Admit refuses:
// HTTP Status with Header and Body (JSON). A LongPoll refusal adds
// "status":500 to Body, so the official client reconnects with its
// backoff instead of failing on an unknown poll status.
type Refusal struct {
	Status int
	Header http.Header
	Body   map[string]any
}

// write answers r; longPoll adds the LongPoll transport's "status" field.
func (r *Refusal) write(w http.ResponseWriter, longPoll bool) {
	body := r.Body
	if longPoll {
		body = make(map[string]any, len(r.Body)+1)
		maps.Copy(body, r.Body)
		body["status"] = http.StatusInternalServerError
	}
	b, err := json.Marshal(body)
	if err != nil {
		b = []byte(`{}`)
	}
	for k, v := range r.Header {
		w.Header()[k] = v
	}
	writeLongPoll(w, r.Status, b)
}

// drainRefusal is the answer to a new socket while the endpoint drains.
func (e *Endpoint) drainRefusal(r *http.Request) *Refusal {
	if e.cfg.Draining != nil {
		if ref := e.cfg.Draining(r); ref != nil {
			return ref
		}
	}
	return &Refusal{Status: http.StatusServiceUnavailable,
		Body: map[string]any{"error": "draining", "message": "the node is draining"}}
}

// refuseUpgrade answers a WebSocket upgrade refused before the upgrade with
// 403 and the body {"error":"forbidden","message":message}. A browser cannot read
// it (it sees a failed upgrade); curl and other clients can.
func refuseUpgrade(w http.ResponseWriter, message string) {
	b, err := json.Marshal(map[string]string{"error": "forbidden", "message": message})
	if err != nil {
		b = []byte(`{}`)
	}
	writeLongPoll(w, http.StatusForbidden, b)
}

// admit asks cfg.Admit about r (nil: admitted).
func (e *Endpoint) admit(r *http.Request) *Refusal {
	if e.cfg.Admit == nil {
		return nil
	}
	ref := e.cfg.Admit(r)
	if ref != nil {
		e.cfg.Tracer.Emit("endpoint.refused", "status", ref.Status)
	}
	return ref
}

// DefaultEndpointConfig returns the defaults.
func DefaultEndpointConfig() EndpointConfig {
	return EndpointConfig{
		HeartbeatTimeout: 60 * time.Second,
		MaxFrameBytes:    64 << 10,
		MaxChannels:      100,
		QueueSize:        1024,
		QueueBytes:       4 << 20,
		QueueMaxLag:      10 * time.Second,
		DrainBatch:       500,
		UnsentBytes:      16 << 10,
		WriteTimeout:     10 * time.Second,
		WriteCoalesce:    2 * time.Millisecond,
	}
}

func (c EndpointConfig) withDefaults() EndpointConfig {
	d := DefaultEndpointConfig()
	if c.HeartbeatTimeout <= 0 {
		c.HeartbeatTimeout = d.HeartbeatTimeout
	}
	if c.MaxFrameBytes <= 0 {
		c.MaxFrameBytes = d.MaxFrameBytes
	}
	if c.MaxChannels <= 0 {
		c.MaxChannels = d.MaxChannels
	}
	if c.QueueSize <= 0 {
		c.QueueSize = d.QueueSize
	}
	if c.QueueBytes <= 0 {
		c.QueueBytes = d.QueueBytes
	}
	if c.DrainBatch <= 0 {
		c.DrainBatch = d.DrainBatch
	}
	if c.QueueMaxLag == 0 {
		c.QueueMaxLag = d.QueueMaxLag
	}
	if c.UnsentBytes == 0 {
		c.UnsentBytes = d.UnsentBytes
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.WriteCoalesce == 0 {
		c.WriteCoalesce = d.WriteCoalesce
	}
	return c
}

// Endpoint serves Phoenix sockets: it is the http.Handler for
// /socket/websocket, routes topics to Handlers and tracks its sockets.
type Endpoint struct {
	cfg    EndpointConfig
	hub    *Hub
	log    *zap.Logger
	routes router
	stats  counters
	nextID atomic.Uint64

	mu        sync.Mutex
	sockets   map[string]*Socket // guarded by mu
	sweepStop chan struct{}      // stops the heartbeat sweep; nil while none runs; guarded by mu
	draining  bool               // guarded by mu
	drained   chan struct{}      // closed when draining and no socket is left

	sched writeSched // when and by whom sockets write
}

// NewEndpoint returns an Endpoint with cfg.
func NewEndpoint(cfg EndpointConfig) *Endpoint {
	cfg = cfg.withDefaults()
	e := &Endpoint{cfg: cfg, hub: cfg.Hub, log: cfg.Logger,
		sockets: make(map[string]*Socket), drained: make(chan struct{})}
	if e.hub == nil {
		e.hub = NewHub()
	}
	e.sched.init(e)
	if e.log == nil {
		e.log = zap.NewNop()
	}
	return e
}

// Handle routes topics matching pattern to h. A pattern ending in "*" is a
// prefix ("session:*"); others match exactly; exact routes win, then the
// longest prefix. Every channel of those topics shares h. Safe to call at
// any time; affects later joins.
func (e *Endpoint) Handle(pattern string, h Handler) {
	if h == nil {
		panic("channels: Handle with a nil handler")
	}
	e.routes.add(pattern, func() Handler { return h })
}

// HandleNew routes topics matching pattern (as Handle) to a handler of
// their own: every join calls newHandler once and that value serves the
// channel's Join, HandleIn and Terminate, so state it keeps lives with the
// channel and goes when the channel ends. A duplicate join gets a new
// value. newHandler must return a non-nil Handler; it runs on the joining
// socket's reader goroutine.
func (e *Endpoint) HandleNew(pattern string, newHandler func() Handler) {
	e.routes.add(pattern, newHandler)
}

// Hub returns the endpoint's Hub.
func (e *Endpoint) Hub() *Hub { return e.hub }

// Stats returns a snapshot of the counters.
func (e *Endpoint) Stats() Stats { return e.stats.snapshot() }

// ServeHTTP accepts a socket (docs/PHOENIX.md §1.2, in Phoenix's order):
// non-GET → 400; draining → 503 with the Draining Refusal; refused by Admit → its Refusal; Origin
// not allowed → 403; vsn not 1.x/2.x →
// 403; Connect error → 403; then the WebSocket upgrade, answering
// Sec-WebSocket-Protocol: phoenix when the client offered it. It returns
// as soon as the socket is attached; the socket is read by a goroutine only
// while it has input (sockReader).
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if e.isDraining() {
		e.drainRefusal(r).write(w, false)
		return
	}
	if ref := e.admit(r); ref != nil {
		ref.write(w, false)
		return
	}
	if !originAllowed(r, e.cfg.AllowedOrigins) {
		refuseUpgrade(w, "the Origin is not allowed")
		return
	}
	params := r.URL.Query()
	ser, err := SerializerFor(params.Get("vsn"))
	if err != nil {
		refuseUpgrade(w, "vsn must be 1.x or 2.x")
		return
	}
	token, offeredPhoenix := authFromProtocols(r.Header)
	if token == "" {
		token = params.Get("token")
	}
	var assigns any
	if e.cfg.Connect != nil {
		if assigns, err = e.cfg.Connect(r, params, token); err != nil {
			e.cfg.Tracer.Emit("endpoint.refused", "err", err.Error())
			refuseUpgrade(w, "the socket was refused: "+err.Error())
			return
		}
	}
	opts := &websocket.AcceptOptions{InsecureSkipVerify: true} // origin checked above
	if offeredPhoenix {
		opts.Subprotocols = []string{"phoenix"}
	}
	sbw := &smallBufWriter{ResponseWriter: w}
	conn, err := websocket.Accept(sbw, r, opts)
	if err != nil {
		return // Accept has answered
	}
	conn.SetReadLimit(-1) // sockReader applies MaxFrameBytes itself
	if tc, ok := sbw.conn.(*net.TCPConn); ok && e.cfg.UnsentBytes > 0 {
		setUnsentLimit(tc, e.cfg.UnsentBytes)
	}
	rd := newSockReader(e, conn, sbw.br)
	var rc syscall.RawConn
	if tc, ok := sbw.conn.(*net.TCPConn); ok {
		rc, _ = tc.SyscallConn()
	}
	// The socket's context starts empty: deriving it from r.Context()
	// would keep the request's and the connection's contexts (and any
	// middleware's values) alive for the socket's whole life.
	s, err := e.Attach(context.Background(), pollTransport{wsTransport: wsTransport{conn: conn, w: sbw.cork, timeout: e.cfg.WriteTimeout, readDone: rd.readDone}, r: rd}, ser, assigns)
	if err != nil {
		_ = conn.Close(websocket.StatusCode(CloseRestart), CloseRestart.String())
		return
	}
	// Let the HTTP handler return: the request, the router's frames and
	// the handler's stack are released. The socket is read by a goroutine
	// only while it has input (sockReader).
	rd.start(s, rc, sbw.early)
}

// authTokenPrefix marks the subprotocol entry carrying the auth token
// (phoenix.js AUTH_TOKEN_PREFIX; docs/PHOENIX.md §1.3).
const authTokenPrefix = "base64url.bearer.phx."

// authFromProtocols extracts the auth token from Sec-WebSocket-Protocol and
// reports whether "phoenix" was offered. phoenix.js encodes with btoa (the
// standard alphabet) minus padding; URL-safe encoding is accepted too.
func authFromProtocols(h http.Header) (token string, phoenix bool) {
	for _, v := range h.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			p = strings.TrimSpace(p)
			if strings.EqualFold(p, "phoenix") {
				phoenix = true
				continue
			}
			enc, ok := strings.CutPrefix(p, authTokenPrefix)
			if !ok || token != "" {
				continue
			}
			enc = strings.TrimRight(enc, "=")
			b, err := base64.RawStdEncoding.DecodeString(enc)
			if err != nil {
				if b, err = base64.RawURLEncoding.DecodeString(enc); err != nil {
					continue
				}
			}
			token = string(b)
		}
	}
	return token, phoenix
}

// Attach starts a socket over t (the WebSocket path calls it after the
// upgrade; in-memory transports call it directly). The caller then feeds
// inbound frames to Receive, one at a time, and calls End when reading
// stops. ctx supplies values for handler contexts; its cancellation is not
// watched. It fails with ErrShutdown while the endpoint drains.
func (e *Endpoint) Attach(ctx context.Context, t Transport, ser Serializer, assigns any) (*Socket, error) {
	if ser == nil {
		ser = V2
	}
	s := &Socket{
		id:      strconv.FormatUint(e.nextID.Add(1), 36),
		ep:      e,
		t:       t,
		ser:     ser,
		serIdx:  ser.index(),
		assigns: assigns,
	}
	s.aw, _ = t.(asyncTransport)
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	e.mu.Lock()
	if e.draining {
		e.mu.Unlock()
		s.cancel()
		return nil, fmt.Errorf("attach socket: %w", ErrShutdown)
	}
	s.lastIn.Store(monoNow())
	e.sockets[s.id] = s
	if e.sweepStop == nil {
		e.sweepStop = make(chan struct{})
		go e.sweep(e.sweepStop)
	}
	e.mu.Unlock()
	e.stats.socketsOpen.Add(1)
	e.stats.sockets.Add(1)
	e.cfg.Tracer.Emit("socket.open", "socket", s.id, "vsn", ser.Version())
	return s, nil
}

func (e *Endpoint) detach(s *Socket) {
	e.stats.socketsOpen.Add(-1)
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.sockets, s.id)
	if len(e.sockets) == 0 && e.sweepStop != nil {
		close(e.sweepStop)
		e.sweepStop = nil
	}
	if e.draining && len(e.sockets) == 0 {
		select {
		case <-e.drained:
		default:
			close(e.drained)
		}
	}
}

// sweepPeriod is how often the heartbeat sweep runs: a second, or a quarter
// of HeartbeatTimeout when that is shorter (at least a millisecond).
func (e *Endpoint) sweepPeriod() time.Duration {
	return max(min(time.Second, e.cfg.HeartbeatTimeout/4), time.Millisecond)
}

// sweep declares dead (Socket.onIdle: close with 1001) every socket that
// received nothing for HeartbeatTimeout, once each sweepPeriod, until stop
// is closed (when the endpoint's last socket is gone). One sweep replaces a
// timer per socket: 10,000 sockets cost one pass over the socket map, tens
// of microseconds, a second.
func (e *Endpoint) sweep(stop chan struct{}) {
	t := time.NewTicker(e.sweepPeriod())
	defer t.Stop()
	limit := int64(e.cfg.HeartbeatTimeout)
	var dead []*Socket
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := monoNow()
		e.mu.Lock()
		for _, s := range e.sockets {
			if now-s.lastIn.Load() >= limit {
				dead = append(dead, s)
			}
		}
		e.mu.Unlock()
		for i, s := range dead {
			s.onIdle()
			dead[i] = nil
		}
		dead = dead[:0]
	}
}

func (e *Endpoint) isDraining() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.draining
}

// Disconnect closes the socket with id with 1001 (the client reconnects). It
// reports whether the socket was found.
func (e *Endpoint) Disconnect(id string) bool {
	e.mu.Lock()
	s := e.sockets[id]
	e.mu.Unlock()
	if s == nil {
		return false
	}
	s.Close(CloseGoingAway)
	return true
}

// Socket returns the open socket with id, or nil.
func (e *Endpoint) Socket(id string) *Socket {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sockets[id]
}

// Shutdown drains the endpoint: new sockets are refused (HTTP 503), every
// socket is closed with 1012 and Shutdown waits until all have ended (their
// channels terminated, goroutines gone) or ctx ends. The closes go out in
// batches of at most DrainBatch sockets, spaced evenly over half of the time
// ctx has left (drainSpacing apart without a deadline, at least drainMinGap
// apart), each batch traced as "endpoint.drain_batch" (batch, sockets).
// Idempotent.
func (e *Endpoint) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	e.draining = true
	socks := make([]*Socket, 0, len(e.sockets))
	for _, s := range e.sockets {
		socks = append(socks, s)
	}
	if len(e.sockets) == 0 {
		select {
		case <-e.drained:
		default:
			close(e.drained)
		}
	}
	e.mu.Unlock()
	size, gap := drainPlan(ctx, len(socks), e.cfg.DrainBatch)
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for batch := 0; len(socks) > 0; batch++ {
		if batch > 0 {
			timer.Reset(gap)
			select {
			case <-timer.C:
			case <-ctx.Done():
				size = len(socks) // out of time: close the rest now
			}
		}
		n := min(size, len(socks))
		e.cfg.Tracer.Emit("endpoint.drain_batch", "batch", batch, "sockets", n)
		for _, s := range socks[:n] {
			s.Close(CloseRestart)
		}
		socks = socks[n:]
	}
	select {
	case <-e.drained:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("channels: shutdown with sockets open: %w", ctx.Err())
	}
}

// Resume undoes Shutdown: new sockets are accepted again (the ops page's
// undrain). Sockets Shutdown closed stay closed; a Shutdown still running
// goes on closing the sockets it listed. No-op unless shut down.
func (e *Endpoint) Resume() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.draining {
		return
	}
	e.draining = false
	e.drained = make(chan struct{})
}

// Drain spacing: without a deadline batches go drainSpacing apart; never
// closer than drainMinGap (a batch grows instead).
const (
	drainSpacing = 100 * time.Millisecond
	drainMinGap  = 10 * time.Millisecond
)

// drainPlan returns the batch size and the gap between batches for closing
// n sockets in batches of at most batch within half of ctx's time left.
func drainPlan(ctx context.Context, n, batch int) (size int, gap time.Duration) {
	batches := (n + batch - 1) / batch
	if batches <= 1 {
		return max(n, 1), 0
	}
	gap = drainSpacing
	if dl, ok := ctx.Deadline(); ok {
		gap = time.Until(dl) / 2 / time.Duration(batches-1)
	}
	if gap < drainMinGap {
		// Fewer, larger batches fit the time left.
		fit := 1
		if dl, ok := ctx.Deadline(); ok {
			fit = max(int(time.Until(dl)/2/drainMinGap), 1)
		}
		batches = min(batches, fit+1)
		return (n + batches - 1) / batches, drainMinGap
	}
	return batch, gap
}

// Drain is Shutdown.
func (e *Endpoint) Drain(ctx context.Context) error { return e.Shutdown(ctx) }
