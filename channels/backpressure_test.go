package channels

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/trace"
)

// A heartbeat received while pushes are queued behind a stuck write is
// answered in the very next write, before those pushes.
func TestHeartbeatReplyPassesQueuedPushes(t *testing.T) {
	ep := NewEndpoint(EndpointConfig{Tracer: trace.New()})
	ep.Handle("room:*", newFuncHandler())
	s, mt := memSocket(t, ep, V2)
	mt.gate, mt.waiting = make(chan struct{}), make(chan int, 16)
	recv(t, s, `["3","3","room:lobby","phx_join",{}]`)
	if n := <-mt.waiting; n != 1 { // the writer holds the join reply, stuck
		t.Fatalf("first batch %d frames", n)
	}
	for i := 0; i < 100; i++ {
		if ep.Hub().Broadcast("room:lobby", "ev", json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), nil) != 1 {
			t.Fatalf("broadcast %d not delivered", i)
		}
	}
	recv(t, s, `[null,"9","phoenix","heartbeat",{}]`)
	mt.gate <- struct{}{} // the join reply goes out
	<-mt.waiting          // the next write is taken
	mt.gate <- struct{}{}
	close(mt.gate)
	f := mt.waitFrames(t, 102)
	if want := `[null,"9","phoenix","phx_reply",{"status":"ok","response":{}}]`; string(f[1].Data) != want {
		t.Fatalf("frame after the join reply: %s, want the heartbeat reply", f[1].Data)
	}
	for i := 0; i < 100; i++ {
		if want := fmt.Sprintf(`[null,null,"room:lobby","ev",{"n":%d}]`, i); string(f[2+i].Data) != want {
			t.Fatalf("frame %d: %s, want %s", 2+i, f[2+i].Data, want)
		}
	}
}

// rawClient is a WebSocket client on a bare TCP connection, so tests see
// the exact bytes the server writes (a torn frame, a missing close frame).
type rawClient struct {
	conn net.Conn
	br   *bufio.Reader
	wmu  sync.Mutex
}

// dialRaw opens a socket with a small receive buffer (rcvbuf bytes, 0: the
// system's), so what is in flight towards a slow reader stays small.
func dialRaw(t *testing.T, ts *testServer, rcvbuf int) *rawClient {
	t.Helper()
	d := net.Dialer{Timeout: testTimeout}
	conn, err := d.Dial("tcp", strings.TrimPrefix(ts.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if rcvbuf > 0 {
		_ = conn.(*net.TCPConn).SetReadBuffer(rcvbuf)
	}
	t.Cleanup(func() { conn.Close() })
	_, err = io.WriteString(conn, "GET /socket/websocket?vsn=2.0.0 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(conn, 512)
	_ = conn.SetReadDeadline(time.Now().Add(testTimeout))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	return &rawClient{conn: conn, br: br}
}

// send writes one masked client frame with opcode op and fin.
func (c *rawClient) send(op byte, fin bool, payload []byte) error {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	out := []byte{b0}
	switch n := len(payload); {
	case n < 126:
		out = append(out, 0x80|byte(n))
	case n < 1<<16:
		out = append(out, 0x80|126)
		out = binary.BigEndian.AppendUint16(out, uint16(n))
	default:
		out = append(out, 0x80|127)
		out = binary.BigEndian.AppendUint64(out, uint64(n))
	}
	key := [4]byte{7, 1, 9, 3}
	out = append(out, key[:]...)
	for i, b := range payload {
		out = append(out, b^key[i%4])
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.conn.Write(out)
	return err
}

func (c *rawClient) sendText(s string) error { return c.send(0x1, true, []byte(s)) }

// rawFrame is a server frame as read off the wire.
type rawFrame struct {
	op      byte
	payload []byte
}

// next reads one whole server frame; a stream that ends inside a frame is an
// error naming the torn frame.
func (c *rawClient) next() (rawFrame, error) {
	var h [2]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		return rawFrame{}, err
	}
	if h[1]&0x80 != 0 {
		return rawFrame{}, fmt.Errorf("masked server frame")
	}
	n := int(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		if _, err := io.ReadFull(c.br, l[:]); err != nil {
			return rawFrame{}, fmt.Errorf("torn frame header: %w", err)
		}
		n = int(binary.BigEndian.Uint16(l[:]))
	case 127:
		var l [8]byte
		if _, err := io.ReadFull(c.br, l[:]); err != nil {
			return rawFrame{}, fmt.Errorf("torn frame header: %w", err)
		}
		n = int(binary.BigEndian.Uint64(l[:]))
	}
	p := make([]byte, n)
	if got, err := io.ReadFull(c.br, p); err != nil {
		return rawFrame{}, fmt.Errorf("torn frame: %d of %d payload bytes: %w", got, n, err)
	}
	return rawFrame{op: h[0] & 0x0f, payload: p}, nil
}

// expectClose reads frames until the close frame and checks its code; the
// stream must hold only whole frames up to it.
func (c *rawClient) expectClose(t *testing.T, code CloseCode) (frames int) {
	t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(testTimeout))
	for {
		f, err := c.next()
		if err != nil {
			t.Fatalf("after %d whole frames: %v (want a whole close frame %d)", frames, err, code)
		}
		if f.op != 0x8 {
			frames++
			continue
		}
		if len(f.payload) < 2 {
			t.Fatalf("close frame without a code: %x", f.payload)
		}
		if got := CloseCode(binary.BigEndian.Uint16(f.payload)); got != code {
			t.Fatalf("close code %d (%q), want %d", got, f.payload[2:], code)
		}
		_ = c.send(0x8, true, f.payload[:2]) // finish the handshake
		return frames
	}
}

// A stuck reader (it reads nothing until it has been cut) receives, once it
// reads, every frame whole and then a whole 1013 close frame: the write that
// timed out mid-frame is finished before the close frame.
func TestStuckReaderGetsWholeCloseFrame(t *testing.T) {
	tr := trace.New()
	ts := newTestServer(t, EndpointConfig{Tracer: tr, WriteTimeout: 300 * time.Millisecond, QueueMaxLag: -1},
		map[string]Handler{"room:*": newFuncHandler()})
	c := dialRaw(t, ts, 16<<10)
	if err := c.sendText(`["3","3","room:lobby","phx_join",{}]`); err != nil {
		t.Fatal(err)
	}
	waitTrace(t, tr, trace.Kind("join.done"))
	payload := json.RawMessage(`{"pad":"` + strings.Repeat("x", 3000) + `"}`)
	// Broadcast until the socket is cut: its write times out mid-batch.
	for tr.Count(trace.Kind("socket.slow")) == 0 {
		ts.ep.Hub().Broadcast("room:lobby", "ev", payload, nil)
		time.Sleep(time.Millisecond) // pacing only; nothing is asserted on time
	}
	e := waitTrace(t, tr, trace.Kind("socket.slow"))
	t.Logf("cut: %v", e)
	n := c.expectClose(t, CloseSlowConsumer)
	t.Logf("%d whole frames before the 1013 close frame", n)
}

// pacedReader reads from r at about rate bytes per second.
type pacedReader struct {
	r     io.Reader
	rate  float64
	start time.Time
	n     atomic.Int64
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if len(b) > 1024 {
		b = b[:1024]
	}
	due := p.start.Add(time.Duration(float64(p.n.Load()) / p.rate * float64(time.Second)))
	time.Sleep(time.Until(due))
	n, err := p.r.Read(b)
	p.n.Add(int64(n))
	return n, err
}

// A reader at about 70% of the push rate keeps getting its heartbeat
// replies: each arrives after at most the pushes that fit in the kernel
// buffers and one write batch (the reply passes the socket's backlog), while
// the backlog itself grows far beyond that. The reply latency is logged, not
// asserted. Once the backlog is older than QueueMaxLag the socket is cut
// with a whole 1013 close frame.
func TestLaggingReaderKeepsHeartbeatsThenIsCut(t *testing.T) {
	tr := trace.New()
	const (
		frameBytes = 1024
		pushRate   = 150 << 10 // bytes/s
		readRate   = 100 << 10
		unsent     = 16 << 10
		rcvbuf     = 16 << 10
	)
	ts := newTestServer(t, EndpointConfig{Tracer: tr, UnsentBytes: unsent, QueueMaxLag: 6 * time.Second,
		QueueBytes: 64 << 20, QueueSize: 1 << 20, WriteTimeout: 30 * time.Second},
		map[string]Handler{"room:*": newFuncHandler()})
	c := dialRaw(t, ts, rcvbuf)
	c.br = bufio.NewReaderSize(&pacedReader{r: c.conn, rate: readRate, start: time.Now()}, 1024)
	if err := c.sendText(`["3","3","room:lobby","phx_join",{}]`); err != nil {
		t.Fatal(err)
	}
	waitTrace(t, tr, trace.Kind("join.done"))

	stop := make(chan struct{})
	var pushed atomic.Int64
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // pushes at pushRate
		defer wg.Done()
		pad := strings.Repeat("x", frameBytes-60)
		start := time.Now()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second * frameBytes / pushRate)))
			if ts.ep.Hub().Broadcast("room:lobby", "ev", json.RawMessage(fmt.Sprintf(`{"n":%d,"p":"%s"}`, i, pad)), nil) == 0 {
				return
			}
			pushed.Add(1)
		}
	}()
	var sentHB atomic.Int64
	sentAt := make(map[string]time.Time)
	var sentMu sync.Mutex
	go func() { // a heartbeat every 250 ms
		defer wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if tr.Count(trace.Kind("socket.slow")) > 0 {
				return
			}
			ref := fmt.Sprint(i)
			sentMu.Lock()
			sentAt[ref] = time.Now()
			sentMu.Unlock()
			if c.sendText(`[null,"`+ref+`","phoenix","heartbeat",{}]`) != nil {
				return
			}
			sentHB.Add(1)
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	// Pushes received between a heartbeat and its reply are bounded by what
	// the kernel buffers and one batch hold, whatever the backlog.
	const maxBetween = (unsent + 2*rcvbuf + batchBytes + 48<<10) / frameBytes
	_ = c.conn.SetReadDeadline(time.Now().Add(3 * testTimeout))
	var (
		replies, pushes, worstBetween int
		worstLatency                  time.Duration
		pushesAtSend                  = map[string]int{}
		lastRef                       int
	)
	for {
		f, err := c.next()
		if err != nil {
			t.Fatalf("after %d pushes, %d replies: %v", pushes, replies, err)
		}
		if f.op == 0x8 {
			if got := CloseCode(binary.BigEndian.Uint16(f.payload)); got != CloseSlowConsumer {
				t.Fatalf("close code %d, want 1013", got)
			}
			_ = c.send(0x8, true, f.payload[:2])
			break
		}
		var m []json.RawMessage
		if err := json.Unmarshal(f.payload, &m); err != nil || len(m) != 5 {
			t.Fatalf("frame %q: %v", f.payload, err)
		}
		if string(m[3]) == `"ev"` {
			pushes++
			// Heartbeats sent since the last frame: note how many pushes the
			// client had when each went out.
			for {
				ref := fmt.Sprint(lastRef + 1)
				sentMu.Lock()
				_, ok := sentAt[ref]
				sentMu.Unlock()
				if !ok {
					break
				}
				lastRef++
				pushesAtSend[ref] = pushes
			}
			continue
		}
		if string(m[2]) != `"phoenix"` {
			continue // the join reply
		}
		var ref string
		_ = json.Unmarshal(m[1], &ref)
		sentMu.Lock()
		at, ok := sentAt[ref]
		sentMu.Unlock()
		if !ok {
			t.Fatalf("reply to unknown ref %q", ref)
		}
		replies++
		if lat := time.Since(at); lat > worstLatency {
			worstLatency = lat
		}
		if p, ok := pushesAtSend[ref]; ok && pushes-p > worstBetween {
			worstBetween = pushes - p
		}
	}
	backlog := int(pushed.Load()) - pushes
	t.Logf("pushed %d, read %d (backlog %d frames at the cut), heartbeats %d, replies %d; worst reply latency %v, at most %d pushes between a heartbeat and its reply (bound %d)",
		pushed.Load(), pushes, backlog, sentHB.Load(), replies, worstLatency, worstBetween, maxBetween)
	if worstBetween > maxBetween {
		t.Fatalf("a heartbeat reply waited behind %d pushes, bound %d", worstBetween, maxBetween)
	}
	if backlog <= maxBetween {
		t.Fatalf("backlog at the cut %d frames: the reader never fell behind more than the bound %d, the test shows nothing", backlog, maxBetween)
	}
	// Every heartbeat is answered but those in flight when the socket was
	// cut (heartbeats stop once it is).
	if int(sentHB.Load())-replies > 3 {
		t.Fatalf("%d heartbeats, %d replies", sentHB.Load(), replies)
	}
	waitTrace(t, tr, trace.Kind("socket.slow", "why", "lag"))
}

// A message over MaxFrameBytes, sent in fragments with pings between them,
// gets a whole 1009 close frame: the server reads on (answering or dropping
// pings, discarding the rest of the message) instead of closing with unread
// input, which would reset the connection.
func TestOversizeFragmentedWithPingsGets1009(t *testing.T) {
	tr := trace.New()
	ts := newTestServer(t, EndpointConfig{Tracer: tr, MaxFrameBytes: 4096}, nil)
	c := dialRaw(t, ts, 0)
	chunk := bytes.Repeat([]byte("a"), 1000)
	errc := make(chan error, 1)
	go func() {
		for i := 0; i < 64; i++ {
			op := byte(0x0) // continuation
			if i == 0 {
				op = 0x1
			}
			if err := c.send(op, false, chunk); err != nil {
				errc <- err
				return
			}
			if err := c.send(0x9, true, []byte(fmt.Sprint(i))); err != nil {
				errc <- err
				return
			}
		}
		errc <- c.send(0x0, true, chunk)
	}()
	_ = c.conn.SetReadDeadline(time.Now().Add(testTimeout))
	pongs := 0
	for {
		f, err := c.next()
		if err != nil {
			t.Fatalf("after %d pongs: %v (want a 1009 close frame)", pongs, err)
		}
		if f.op == 0xA {
			pongs++
			continue
		}
		if f.op != 0x8 {
			t.Fatalf("unexpected frame op %x", f.op)
		}
		if got := CloseCode(binary.BigEndian.Uint16(f.payload)); got != CloseTooBig {
			t.Fatalf("close code %d, want 1009", got)
		}
		break
	}
	if err := <-errc; err != nil {
		t.Fatalf("client write failed (connection reset?): %v", err)
	}
	_ = c.send(0x8, true, []byte{0x03, 0xf1})
	// The server closes after our close frame: a clean end of stream.
	if _, err := c.next(); err != io.EOF {
		t.Fatalf("after the close handshake: %v, want EOF", err)
	}
	waitTrace(t, tr, trace.Kind("socket.too_big"))
}

// Shutdown closes 1,000 sockets in batches of at most DrainBatch, spread
// over the time it has: the trace shows every batch point followed by
// exactly its sockets' 1012 closes, in ten distinct batches.
func TestShutdownClosesInBatches(t *testing.T) {
	tr := trace.New()
	ep := NewEndpoint(EndpointConfig{Tracer: tr, DrainBatch: 100})
	var wg sync.WaitGroup
	for i := 0; i < 1000; i++ {
		mt := newMemTransport()
		s, err := ep.Attach(t.Context(), mt, V2, nil)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { // the reading side ends when the transport closes
			defer wg.Done()
			<-mt.closed
			s.End()
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // spread over half of it
	defer cancel()
	if err := ep.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	batches, closes, inBatch := 0, 0, -1
	for _, e := range tr.Events() {
		switch e.Kind {
		case "endpoint.drain_batch":
			if inBatch >= 0 && inBatch != 100 {
				t.Fatalf("batch %d closed %d sockets, want 100", batches-1, inBatch)
			}
			batches++
			inBatch = 0
		case "socket.close":
			if e.Get("code") == int(CloseRestart) {
				if inBatch < 0 {
					t.Fatal("a socket closed before the first batch")
				}
				closes++
				inBatch++
			}
		}
	}
	if batches != 10 || closes != 1000 || inBatch != 100 {
		t.Fatalf("%d batches, %d closes (last batch %d), want 10 batches of 100", batches, closes, inBatch)
	}
}

// A reader that stops reading altogether is cut by SOCKET_MAX_LAG when that
// is shorter than the write timeout: the frames of its parked write have
// waited at least as long as the write has, so the sweep expires the write
// after QueueMaxLag (here 300 ms; the write timeout is an hour) and the
// socket is cut with 1013. No broadcast follows the park, so no queue limit
// and no pre-write lag check can be what cuts it.
func TestStalledWriteCutAfterMaxLag(t *testing.T) {
	tr := trace.New()
	ts := newTestServer(t, EndpointConfig{Tracer: tr, WriteTimeout: time.Hour, QueueMaxLag: 300 * time.Millisecond},
		map[string]Handler{"room:*": newFuncHandler()})
	c := dialRaw(t, ts, 16<<10)
	if err := c.sendText(`["3","3","room:lobby","phx_join",{}]`); err != nil {
		t.Fatal(err)
	}
	waitTrace(t, tr, trace.Kind("join.done"))
	payload := json.RawMessage(`{"pad":"` + strings.Repeat("x", 3000) + `"}`)
	parked := func() bool {
		ts.ep.sched.mu.Lock()
		defer ts.ep.sched.mu.Unlock()
		return len(ts.ep.sched.parked) > 0
	}
	for !parked() {
		ts.ep.Hub().Broadcast("room:lobby", "ev", payload, nil)
		time.Sleep(time.Millisecond) // pacing only; nothing is asserted on time
	}
	waitTrace(t, tr, trace.Kind("socket.write_expired"))
	e := waitTrace(t, tr, trace.Kind("socket.slow"))
	t.Logf("cut: %v", e)
	c.expectClose(t, CloseSlowConsumer)
}
