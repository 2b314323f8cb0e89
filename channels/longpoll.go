package channels

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// LongPollConfig configures a LongPoll handler. Zero fields take the
// defaults of DefaultLongPollConfig.
type LongPollConfig struct {
	// Node is the node name written into session tokens. A poll or post
	// whose token names another node is answered 410 (the client starts a
	// new session where it landed; docs/PHOENIX.md §6.5).
	Node string
	// Window is how long a poll is held waiting for frames before it is
	// answered 204, and how long a session may go without a poll being held
	// before it is closed (its socket ends with 1001 "poll timeout", its
	// channels terminate). Default 10 s (Phoenix's window_ms).
	Window time.Duration
	// MaxBodyBytes is the largest POST body; a larger one is answered 413
	// and nothing of it is dispatched. Default 1 MiB. Each frame of a batch
	// is also held to the endpoint's MaxFrameBytes (413).
	MaxBodyBytes int64
	// SessionMaxAge is how long a session token is valid. A poll or post
	// with an older token is answered 410 and the session is closed; the
	// client reconnects with a new session. Default 24 h.
	SessionMaxAge time.Duration
	// Now is the clock session tokens are issued and checked with (token
	// ages only; holds and idle closes use timers). Nil: time.Now.
	Now func() time.Time
}

// DefaultLongPollConfig returns the defaults.
func DefaultLongPollConfig() LongPollConfig {
	return LongPollConfig{Window: 10 * time.Second, MaxBodyBytes: 1 << 20, SessionMaxAge: 24 * time.Hour}
}

// longPollBufferBytes bounds the frame bytes a session holds for its next
// poll. A write beyond it waits for a poll to take the buffer, for at most
// the endpoint's WriteTimeout (then the socket is cut as a slow consumer,
// 1013); meanwhile later frames wait in the socket's bounded queue, where
// QueueSize, QueueBytes and QueueMaxLag apply as on a WebSocket.
const longPollBufferBytes = 512 << 10

// LongPoll serves the Phoenix LongPoll transport at /socket/longpoll
// (docs/PHOENIX.md §6): each session is a Socket of the Endpoint, with the
// same serializers, Connect hook, channels, limits and slow-consumer rules as
// a WebSocket, whose transport is a buffer that GET polls take. Sessions
// live in this process only: their tokens are signed with a key drawn at
// NewLongPoll, so a token is valid only on the node (and the process) that
// issued it.
type LongPoll struct {
	ep  *Endpoint
	cfg LongPollConfig
	key []byte // HMAC-SHA256 key of session tokens, random per process

	mu       sync.Mutex
	sessions map[string]*lpSession // guarded by mu

	created atomic.Uint64
	gone    [lpGoneReasons]atomic.Uint64
}

// NewLongPoll returns the LongPoll handler serving ep's channels.
func NewLongPoll(ep *Endpoint, cfg LongPollConfig) *LongPoll {
	d := DefaultLongPollConfig()
	if cfg.Window <= 0 {
		cfg.Window = d.Window
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = d.MaxBodyBytes
	}
	if cfg.SessionMaxAge <= 0 {
		cfg.SessionMaxAge = d.SessionMaxAge
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic("channels: no randomness for longpoll session keys: " + err.Error())
	}
	return &LongPoll{ep: ep, cfg: cfg, key: key, sessions: make(map[string]*lpSession)}
}

// Why a poll or post found no session (the 410 answers), as counted in
// LongPollStats.Gone and traced as "longpoll.gone" (why).
const (
	lpGoneNoToken   = iota // a POST without a session token
	lpGoneBadToken         // not a session token of this node's key: tampered, or from a restarted process
	lpGoneOtherNode        // the token names another node
	lpGoneExpired          // older than SessionMaxAge
	lpGoneEnded            // the session was closed or timed out
	lpGoneReasons
)

var lpGoneNames = [lpGoneReasons]string{"no_token", "bad_token", "other_node", "expired", "ended"}

// LongPollStats counts LongPoll sessions.
type LongPollStats struct {
	Open    int               // sessions held now
	Created uint64            // sessions ever created
	Gone    map[string]uint64 // polls and posts answered 410, by reason: no_token, bad_token, other_node, expired, ended
}

// Stats returns a snapshot of the counters.
func (lp *LongPoll) Stats() LongPollStats {
	lp.mu.Lock()
	open := len(lp.sessions)
	lp.mu.Unlock()
	st := LongPollStats{Open: open, Created: lp.created.Load(), Gone: make(map[string]uint64, lpGoneReasons)}
	for i := range lp.gone {
		st.Gone[lpGoneNames[i]] = lp.gone[i].Load()
	}
	return st
}

// ServeHTTP answers the LongPoll transport (docs/PHOENIX.md §6.2). Every
// answer is JSON with the logical status in "status"; the protocol's own
// statuses go in an HTTP 200 (as Phoenix sends them, since a 204 cannot
// carry a body):
//
//   - OPTIONS: a CORS preflight (200, empty).
//   - Another method than GET, POST or OPTIONS: HTTP 400.
//   - Origin not allowed: {"status":403}.
//   - GET without a session token creates a session: {"status":410,
//     "token","messages":[]}; vsn not 1.x/2.x or a Connect refusal is
//     {"status":403}; a draining endpoint answers HTTP 503 with its
//     Draining Refusal plus "status":500 (the client retries), and one
//     whose Admit refuses answers the Refusal with "status":500 added.
//   - GET with a session token polls: {"status":200,"token","messages":[…]}
//     with the frames queued since the last poll, as JSON strings, or
//     {"status":204,"token"} when none came within Window.
//   - POST with a session token dispatches a batch: {"status":200}. Refused
//     whole, nothing dispatched: a body over MaxBodyBytes or a frame over
//     MaxFrameBytes (HTTP 413, "status":413, "error":"body_too_large" or
//     "frame_too_large"), a malformed batch or a frame the serializer
//     rejects (HTTP 400, "status":400, "error":"invalid_batch").
//   - A session token that is tampered, expired, of another node or of an
//     ended session, and a POST without one: {"status":410} (the client
//     reconnects and starts a new session).
func (lp *LongPoll) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", "*") // cross-origin use is policed by the Origin check
	switch r.Method {
	case http.MethodOptions:
		h.Set("Access-Control-Allow-Headers", strings.Join(r.Header.Values("Access-Control-Request-Headers"), ", "))
		h.Set("Access-Control-Allow-Methods", "get, post, options")
		h.Set("Access-Control-Max-Age", "3600")
		w.WriteHeader(http.StatusOK)
		return
	case http.MethodGet, http.MethodPost:
	default:
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if !originAllowed(r, lp.ep.cfg.AllowedOrigins) {
		writeLongPoll(w, http.StatusOK, statusBody(http.StatusForbidden))
		return
	}
	query := r.URL.Query()
	tok := sessionToken(r, query)
	if tok == "" {
		if r.Method == http.MethodPost {
			lp.answerGone(w, nil, lpGoneNoToken)
			return
		}
		lp.create(w, r, query)
		return
	}
	sess, why := lp.resume(tok)
	if sess == nil {
		lp.answerGone(w, nil, why)
		return
	}
	if r.Method == http.MethodGet {
		lp.poll(w, r, sess, tok)
		return
	}
	lp.publish(w, r, sess)
}

// lpTokenPrefix starts every session token; a JWT never does, so a "token"
// query parameter is told apart from the application's own.
const lpTokenPrefix = "lp1."

// sessionToken returns the session token of a request: the
// X-Phoenix-LongPoll-Token header, else the last "token" query parameter
// when it is a session token (phoenix.js appends it after the application's
// params, which may hold a "token" of their own).
func sessionToken(r *http.Request, q map[string][]string) string {
	if t := r.Header.Get("X-Phoenix-LongPoll-Token"); t != "" {
		return t
	}
	if v := q["token"]; len(v) > 0 && strings.HasPrefix(v[len(v)-1], lpTokenPrefix) {
		return v[len(v)-1]
	}
	return ""
}

// lpClaims are what a session token says.
type lpClaims struct {
	Node    string `json:"n"`
	Session string `json:"s"`
	Issued  int64  `json:"t"` // Unix seconds
}

// sign returns a session token: lpTokenPrefix, the claims as base64url JSON,
// ".", and the base64url HMAC-SHA256 of everything before it.
func (lp *LongPoll) sign(c lpClaims) string {
	p, _ := json.Marshal(c)
	tok := lpTokenPrefix + base64.RawURLEncoding.EncodeToString(p)
	m := hmac.New(sha256.New, lp.key)
	m.Write([]byte(tok))
	return tok + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// verify checks a session token: a token naming another node is
// lpGoneOtherNode (whatever its signature: only the naming node could check
// it), a bad signature or shape lpGoneBadToken, an old one lpGoneExpired.
func (lp *LongPoll) verify(tok string) (lpClaims, int) {
	var c lpClaims
	body, sig, ok := strings.Cut(strings.TrimPrefix(tok, lpTokenPrefix), ".")
	if !ok || !strings.HasPrefix(tok, lpTokenPrefix) {
		return c, lpGoneBadToken
	}
	p, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || json.Unmarshal(p, &c) != nil {
		return c, lpGoneBadToken
	}
	if c.Node != lp.cfg.Node {
		return c, lpGoneOtherNode
	}
	want, err := base64.RawURLEncoding.DecodeString(sig)
	m := hmac.New(sha256.New, lp.key)
	m.Write([]byte(tok[:len(lpTokenPrefix)+len(body)]))
	if err != nil || !hmac.Equal(m.Sum(nil), want) {
		return c, lpGoneBadToken
	}
	if lp.cfg.Now().Sub(time.Unix(c.Issued, 0)) > lp.cfg.SessionMaxAge {
		return c, lpGoneExpired
	}
	return c, -1
}

// resume finds the session of a token, or says why there is none. An
// expired token also closes its session (1001 "session expired").
func (lp *LongPoll) resume(tok string) (*lpSession, int) {
	c, why := lp.verify(tok)
	if why == lpGoneExpired {
		if sess := lp.session(c.Session); sess != nil {
			sess.sock.closeWith(CloseGoingAway, "session expired")
		}
	}
	if why >= 0 {
		return nil, why
	}
	sess := lp.session(c.Session)
	if sess == nil {
		return nil, lpGoneEnded
	}
	return sess, -1
}

func (lp *LongPoll) session(id string) *lpSession {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return lp.sessions[id]
}

func (lp *LongPoll) remove(sess *lpSession) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.sessions[sess.id] == sess {
		delete(lp.sessions, sess.id)
	}
}

func (lp *LongPoll) answerGone(w http.ResponseWriter, sess *lpSession, why int) {
	lp.gone[why].Add(1)
	id := ""
	if sess != nil {
		id = sess.id
	}
	lp.ep.cfg.Tracer.Emit("longpoll.gone", "session", id, "why", lpGoneNames[why])
	writeLongPoll(w, http.StatusOK, statusBody(http.StatusGone))
}

// create starts a session (docs/PHOENIX.md §6.2): the checks of the
// WebSocket endpoint in its order (draining, vsn, Connect with the
// X-Phoenix-AuthToken header or the first "token" parameter), then a Socket
// whose transport is the new session.
func (lp *LongPoll) create(w http.ResponseWriter, r *http.Request, query map[string][]string) {
	ep := lp.ep
	if ep.isDraining() {
		ep.drainRefusal(r).write(w, true)
		return
	}
	if ref := ep.admit(r); ref != nil {
		ref.write(w, true)
		return
	}
	vsn := ""
	if v := query["vsn"]; len(v) > 0 {
		vsn = v[0]
	}
	ser, err := SerializerFor(vsn)
	if err != nil {
		writeLongPoll(w, http.StatusOK, statusBody(http.StatusForbidden))
		return
	}
	authToken := r.Header.Get("X-Phoenix-AuthToken")
	if authToken == "" {
		if v := query["token"]; len(v) > 0 {
			authToken = v[0]
		}
	}
	var assigns any
	if ep.cfg.Connect != nil {
		if assigns, err = ep.cfg.Connect(r, query, authToken); err != nil {
			ep.cfg.Tracer.Emit("endpoint.refused", "err", err.Error())
			writeLongPoll(w, http.StatusOK, statusBody(http.StatusForbidden))
			return
		}
	}
	idb := make([]byte, 16)
	_, _ = rand.Read(idb)
	sess := &lpSession{lp: lp, id: base64.RawURLEncoding.EncodeToString(idb), attached: make(chan struct{}),
		lastPoll: time.Now()}
	sess.idle = time.AfterFunc(lp.cfg.Window, sess.onIdle)
	// Registered before Attach: a close racing the attach (a drain) finds
	// it to remove. Nobody can reach it before its token is answered.
	lp.mu.Lock()
	lp.sessions[sess.id] = sess
	lp.mu.Unlock()
	s, err := ep.Attach(context.Background(), sess, ser, assigns)
	if err != nil {
		sess.idle.Stop()
		lp.remove(sess)
		ep.drainRefusal(r).write(w, true)
		return
	}
	sess.sock = s
	close(sess.attached)
	lp.created.Add(1)
	tok := lp.sign(lpClaims{Node: lp.cfg.Node, Session: sess.id, Issued: lp.cfg.Now().Unix()})
	ep.cfg.Tracer.Emit("longpoll.open", "session", sess.id, "socket", s.id)
	b := append([]byte(`{"status":410,"token":`), appendJSONString(nil, tok)...)
	writeLongPoll(w, http.StatusOK, append(b, `,"messages":[]}`...))
}

// poll answers a GET of a session: at once with what is buffered, else after
// holding until a frame comes or Window ends. A newer poll of the same
// session answers an older one 204 at once; a poll whose client went away
// takes nothing. A closed session whose buffer is empty is answered 410.
func (lp *LongPoll) poll(w http.ResponseWriter, r *http.Request, sess *lpSession, tok string) {
	markAlive(sess.sock)
	sess.mu.Lock()
	if sess.n == 0 && !sess.closed {
		if sess.waiting != nil {
			close(sess.waiting) // superseded: answered 204
		}
		ch := make(chan struct{})
		sess.waiting = ch
		sess.mu.Unlock()
		lp.ep.cfg.Tracer.Emit("longpoll.held", "session", sess.id)
		timer := time.NewTimer(lp.cfg.Window)
		clientGone := false
		select {
		case <-ch:
		case <-timer.C:
		case <-r.Context().Done():
			clientGone = true
		}
		timer.Stop()
		sess.mu.Lock()
		superseded := sess.waiting != nil && sess.waiting != ch
		if sess.waiting == ch {
			sess.waiting = nil
		}
		if clientGone || superseded {
			sess.pollEndedLocked()
			sess.mu.Unlock()
			if !clientGone {
				writeLongPoll(w, http.StatusOK, tokenBody(http.StatusNoContent, tok))
			}
			return
		}
	}
	markAlive(sess.sock)
	if sess.n > 0 {
		msgs, n := sess.msgs, sess.n
		sess.msgs, sess.n, sess.bytes = nil, 0, 0
		if sess.room != nil {
			close(sess.room)
			sess.room = nil
		}
		ended := sess.closed
		sess.pollEndedLocked()
		sess.mu.Unlock()
		if ended {
			lp.remove(sess)
		}
		lp.ep.cfg.Tracer.Emit("longpoll.messages", "session", sess.id, "frames", n)
		b := append([]byte(`{"status":200,"token":`), appendJSONString(nil, tok)...)
		b = append(b, `,"messages":[`...)
		b = append(b, msgs...)
		writeLongPoll(w, http.StatusOK, append(b, "]}"...))
		return
	}
	if sess.closed {
		sess.mu.Unlock()
		lp.remove(sess)
		lp.answerGone(w, sess, lpGoneEnded)
		return
	}
	sess.pollEndedLocked()
	sess.mu.Unlock()
	writeLongPoll(w, http.StatusOK, tokenBody(http.StatusNoContent, tok))
}

// publish dispatches the batch of a POST to the session's socket, in order,
// as its reading side (one POST at a time per session). The whole batch is
// decoded first: a batch that does not decode is refused with nothing
// dispatched.
func (lp *LongPoll) publish(w http.ResponseWriter, r *http.Request, sess *lpSession) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, lp.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			lp.refuse(w, sess, http.StatusRequestEntityTooLarge, "body_too_large",
				fmt.Sprintf("the body is over %d bytes", lp.cfg.MaxBodyBytes))
			return
		}
		lp.refuse(w, sess, http.StatusBadRequest, "invalid_batch", "the body could not be read")
		return
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	frames, err := decodeLongPollBatch(body, mt == "application/x-ndjson", lp.ep.cfg.MaxFrameBytes)
	if err == nil {
		for i, f := range frames {
			if _, derr := sess.sock.ser.Decode(f); derr != nil {
				err = fmt.Errorf("%w: frame %d: %v", ErrBatchMalformed, i+1, derr)
				break
			}
		}
	}
	if errors.Is(err, ErrFrameTooBig) {
		lp.refuse(w, sess, http.StatusRequestEntityTooLarge, "frame_too_large", err.Error())
		return
	}
	if err != nil {
		lp.refuse(w, sess, http.StatusBadRequest, "invalid_batch", err.Error())
		return
	}
	sess.recvMu.Lock()
	if sess.readDone {
		sess.recvMu.Unlock()
		lp.answerGone(w, sess, lpGoneEnded)
		return
	}
	for _, f := range frames {
		if sess.sock.Receive(f) != nil {
			sess.recvMu.Unlock()
			lp.answerGone(w, sess, lpGoneEnded)
			return
		}
	}
	sess.recvMu.Unlock()
	writeLongPoll(w, http.StatusOK, statusBody(http.StatusOK))
}

// refuse answers a POST that changes nothing with an HTTP error status and
// {"status","error","message"}.
func (lp *LongPoll) refuse(w http.ResponseWriter, sess *lpSession, status int, code, msg string) {
	lp.ep.stats.badFrames.Add(1)
	lp.ep.cfg.Tracer.Emit("longpoll.refused", "session", sess.id, "status", status, "error", code)
	b := append([]byte(`{"status":`), strconv.Itoa(status)...)
	b = append(b, `,"error":`...)
	b = appendJSONString(b, code)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, msg)
	writeLongPoll(w, status, append(b, '}'))
}

func statusBody(status int) []byte {
	return append(append([]byte(`{"status":`), strconv.Itoa(status)...), '}')
}

func tokenBody(status int, tok string) []byte {
	b := append(append([]byte(`{"status":`), strconv.Itoa(status)...), `,"token":`...)
	return append(appendJSONString(b, tok), '}')
}

// writeLongPoll writes a JSON answer that no cache may keep (the session
// token may travel in a header, making every poll URL alike).
func writeLongPoll(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// markAlive counts a poll as input for the socket's idle timeout: phoenix.js
// sends no heartbeats over LongPoll, its polls are its sign of life.
func markAlive(s *Socket) { s.lastIn.Store(monoNow()) }

// errLongPollBinary fails a write of a binary frame: the LongPoll client
// decodes every polled message as JSON text, so binary frames cannot reach
// it; the socket closes (1001 "write failed") and the client reconnects.
var errLongPollBinary = errors.New("channels: binary frame on a longpoll session")

// lpSession is one LongPoll session: the Transport of its Socket. Frames
// written wait in msgs, encoded as JSON strings, for the next poll.
type lpSession struct {
	lp       *LongPoll
	id       string
	sock     *Socket       // set before attached is closed
	attached chan struct{} // closed once sock is set
	idle     *time.Timer   // closes the session when no poll was held for Window

	recvMu   sync.Mutex // held while a POST dispatches; orders posts and End
	readDone bool       // the session closed: posts get 410; guarded by recvMu

	mu       sync.Mutex
	msgs     []byte        // the frames as comma-separated JSON strings; guarded by mu
	n        int           // frames in msgs; guarded by mu
	bytes    int           // frame bytes in msgs; guarded by mu
	waiting  chan struct{} // the held poll's wake-up, nil when none is held; guarded by mu
	room     chan struct{} // closed when a poll takes msgs (a full buffer's writer waits on it); guarded by mu
	closed   bool          // Close was called; guarded by mu
	lastPoll time.Time     // when the last poll ended; guarded by mu
}

// Write queues frames for the next poll and wakes the poll held, if any. It
// waits for a poll to take the buffer when it holds longPollBufferBytes
// already, for at most the endpoint's WriteTimeout (then it fails with
// context.DeadlineExceeded: the socket is cut as a slow consumer), or until
// the socket is asked to close (ErrSocketClosed). A binary frame fails with
// errLongPollBinary.
func (sess *lpSession) Write(_ context.Context, frames []Frame) error {
	size := 0
	for _, f := range frames {
		if f.Binary {
			return errLongPollBinary
		}
		size += len(f.Data)
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	sess.mu.Lock()
	for !sess.closed && sess.bytes > 0 && sess.bytes+size > longPollBufferBytes {
		if sess.room == nil {
			sess.room = make(chan struct{})
		}
		room := sess.room
		sess.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(sess.lp.ep.cfg.WriteTimeout)
		}
		select {
		case <-room:
		case <-sess.sock.ctx.Done():
			return ErrSocketClosed // a close request: nothing is half written
		case <-timer.C:
			return fmt.Errorf("longpoll session %s: no poll took the buffer: %w", sess.id, context.DeadlineExceeded)
		}
		sess.mu.Lock()
	}
	if sess.closed {
		sess.mu.Unlock()
		return ErrSocketClosed
	}
	for _, f := range frames {
		if sess.n > 0 {
			sess.msgs = append(sess.msgs, ',')
		}
		sess.msgs = appendJSONString(sess.msgs, string(f.Data))
		sess.n++
	}
	sess.bytes += size
	if sess.waiting != nil {
		close(sess.waiting)
		sess.waiting = nil
	}
	sess.mu.Unlock()
	return nil
}

// Close ends the session: the poll held (if any) is answered with what is
// buffered, or 410; posts are answered 410; the socket's End runs on its own
// goroutine (it waits for the writer, which is calling Close). Frames still
// buffered are kept for one more poll, at most Window. The close code does
// not reach the client: LongPoll has none, every end is a 410 and a
// reconnect.
func (sess *lpSession) Close(code CloseCode, _ string) error {
	sess.mu.Lock()
	if sess.closed {
		sess.mu.Unlock()
		return nil
	}
	sess.closed = true
	if sess.waiting != nil {
		close(sess.waiting)
		sess.waiting = nil
	}
	if sess.room != nil {
		close(sess.room)
		sess.room = nil
	}
	empty := sess.n == 0
	if !empty {
		sess.idle.Reset(sess.lp.cfg.Window)
	}
	sess.mu.Unlock()
	if empty {
		sess.idle.Stop()
		sess.lp.remove(sess)
	}
	sess.lp.ep.cfg.Tracer.Emit("longpoll.close", "session", sess.id, "code", int(code))
	go func() {
		<-sess.attached
		sess.recvMu.Lock()
		sess.readDone = true
		sess.recvMu.Unlock()
		sess.sock.End()
	}()
	return nil
}

// pollEndedLocked notes that a poll ended and, when none is held any more,
// starts the idle clock.
func (sess *lpSession) pollEndedLocked() {
	sess.lastPoll = time.Now()
	if sess.waiting == nil && !sess.closed {
		sess.idle.Reset(sess.lp.cfg.Window)
	}
}

// onIdle runs on the idle timer: a session with no poll held for Window is
// closed (1001 "poll timeout"; traced "longpoll.idle"); a closed one still
// holding frames is dropped.
func (sess *lpSession) onIdle() {
	<-sess.attached
	sess.mu.Lock()
	if sess.closed {
		sess.mu.Unlock()
		sess.lp.remove(sess)
		return
	}
	if sess.waiting != nil {
		sess.mu.Unlock()
		return
	}
	if left := sess.lp.cfg.Window - time.Since(sess.lastPoll); left > 0 {
		sess.idle.Reset(left)
		sess.mu.Unlock()
		return
	}
	sess.mu.Unlock()
	sess.lp.ep.cfg.Tracer.Emit("longpoll.idle", "session", sess.id)
	sess.sock.closeWith(CloseGoingAway, "poll timeout")
}
