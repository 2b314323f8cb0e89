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
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/relaygw/relay/internal/trace"
)

// wsRaw is a WebSocket client on a bare TCP connection, so a test
// decides how a frame is split across writes and keeps its own goroutines
// out of the count.
type wsRaw struct {
	t  testing.TB
	c  net.Conn
	br *bufio.Reader
}

func dialWS(t testing.TB, ts *testServer) *wsRaw {
	t.Helper()
	addr := strings.TrimPrefix(ts.srv.URL, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(testTimeout)) // hang guard only
	req := "GET /socket/websocket?vsn=2.0.0 HTTP/1.1\r\nHost: " + addr +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	return &wsRaw{t: t, c: c, br: br}
}

// clientFrame builds a masked client frame (RFC 6455 §5.2) of any length.
func clientFrame(op byte, fin bool, payload []byte, key uint32) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	out := []byte{b0}
	switch n := len(payload); {
	case n < 126:
		out = append(out, 0x80|byte(n))
	case n <= 0xffff:
		out = append(out, 0x80|126)
		out = binary.BigEndian.AppendUint16(out, uint16(n))
	default:
		out = append(out, 0x80|127)
		out = binary.BigEndian.AppendUint64(out, uint64(n))
	}
	out = binary.BigEndian.AppendUint32(out, key)
	var k [4]byte
	binary.BigEndian.PutUint32(k[:], key)
	for i, c := range payload {
		out = append(out, c^k[i%4])
	}
	return out
}

func (r *wsRaw) write(b []byte) {
	r.t.Helper()
	if _, err := r.c.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

func (r *wsRaw) send(text string) { r.write(clientFrame(0x1, true, []byte(text), 0x01020304)) }

// readFrame reads one server frame (unmasked): its opcode and payload.
func (r *wsRaw) readFrame() (byte, []byte) {
	r.t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(r.br, h[:]); err != nil {
		r.t.Fatalf("read frame: %v", err)
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		_, _ = io.ReadFull(r.br, l[:])
		n = uint64(binary.BigEndian.Uint16(l[:]))
	case 127:
		var l [8]byte
		_, _ = io.ReadFull(r.br, l[:])
		n = binary.BigEndian.Uint64(l[:])
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r.br, p); err != nil {
		r.t.Fatalf("read frame payload: %v", err)
	}
	return h[0] & 0x0f, p
}

func (r *wsRaw) expect(want string) {
	r.t.Helper()
	if op, p := r.readFrame(); op != 0x1 || string(p) != want {
		r.t.Fatalf("got opcode %d %s, want %s", op, p, want)
	}
}

func (r *wsRaw) join(ref string) {
	r.t.Helper()
	r.send(`["` + ref + `","` + ref + `","room:lobby","phx_join",{}]`)
	r.expect(`["` + ref + `","` + ref + `","room:lobby","phx_reply",{"status":"ok","response":{}}]`)
}

// waitIdle waits until n reads have gone idle in all (socket.read_idle).
func waitIdle(t testing.TB, tr *trace.Tracer, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := tr.WaitForN(ctx, trace.Kind("socket.read_idle"), n); err != nil {
		_, stacks := readerGoroutines()
		t.Fatalf("%d reads gone idle: %v; reading goroutines:\n%s", n, err, stacks)
	}
}

// readerGoroutines counts goroutines running a socket's read (a poll run or
// a goroutine-per-socket loop) and returns their stacks.
func readerGoroutines() (int, string) {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n, stacks := 0, ""
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("channels.(*sockReader)")) {
			n++
			stacks += string(g) + "\n\n"
		}
	}
	return n, stacks
}

// TestIdleJoinedSocketsHaveNoGoroutine: once N sockets have joined and gone
// idle, none of them has a goroutine: no reader (counted by stack), and the
// process's goroutine count grew by at most two shared goroutines (the
// poller's and the endpoint's heartbeat sweep).
func TestIdleJoinedSocketsHaveNoGoroutine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the read poller is Linux only")
	}
	const n = 100
	ts := roomServer(t, echoHandler(), EndpointConfig{})
	before := runtime.NumGoroutine()
	clients := make([]*wsRaw, n)
	for i := range clients {
		clients[i] = dialWS(t, ts)
		clients[i].join("1")
	}
	waitIdle(t, ts.tr, n)
	// A run emits socket.read_idle just before it returns; the HTTP
	// server's connection goroutines end once the handler returned.
	deadline := time.Now().Add(testTimeout)
	for {
		r, _ := readerGoroutines()
		if r == 0 && runtime.NumGoroutine() <= before+2 || time.Now().After(deadline) {
			break
		}
		runtime.Gosched()
	}
	if r, stacks := readerGoroutines(); r != 0 {
		t.Fatalf("%d reader goroutines for %d idle sockets:\n%s", r, n, stacks)
	}
	if g := runtime.NumGoroutine() - before; g > 2 {
		t.Fatalf("%d more goroutines for %d idle sockets (want at most the poller and the heartbeat sweep)", g, n)
	}
	// Every socket is still read: each answers a push.
	for i, c := range clients {
		ref := fmt.Sprint(i + 2)
		c.send(`["1","` + ref + `","room:lobby","echo",{"i":` + ref + `}]`)
		c.expect(`["1","` + ref + `","room:lobby","phx_reply",{"status":"ok","response":{"i":` + ref + `}}]`)
	}
}

// TestIdleSocketReadAfterIdle: a socket that went idle (no goroutine) is read
// again when the client sends, over many idle periods, including a frame
// whose header and payload arrive in separate writes after the socket went
// idle in between.
func TestIdleSocketReadAfterIdle(t *testing.T) {
	ts := roomServer(t, echoHandler(), EndpointConfig{})
	c := dialWS(t, ts)
	c.join("1")
	polled := runtime.GOOS == "linux"
	if polled {
		waitIdle(t, ts.tr, 1)
	}
	for i := 2; i < 30; i++ {
		ref := fmt.Sprint(i)
		msg := `["1","` + ref + `","room:lobby","echo",{"n":` + ref + `}]`
		f := clientFrame(0x1, true, []byte(msg), uint32(i)*0x9e3779b9)
		cut := i % len(f)
		c.write(f[:cut]) // a first part alone wakes the socket, whose read waits for the rest
		c.write(f[cut:])
		c.expect(`["1","` + ref + `","room:lobby","phx_reply",{"status":"ok","response":{"n":` + ref + `}}]`)
		if polled {
			waitIdle(t, ts.tr, i)
		}
	}
}

// TestBigFrameRead: messages far larger than the connection's read buffer
// (1 MiB and more, fragmented or not, within MaxFrameBytes) are read whole,
// and one over the limit closes with 1009.
func TestBigFrameRead(t *testing.T) {
	h := newFuncHandler()
	h.handleIn = func(ctx context.Context, ch *Channel, event string, p json.RawMessage) (any, error) {
		var s string
		if err := json.Unmarshal(p, &s); err != nil {
			return nil, err
		}
		return map[string]any{"len": len(s), "tail": s[len(s)-8:]}, nil
	}
	ts := roomServer(t, h, EndpointConfig{MaxFrameBytes: 3 << 20})
	c := dialWS(t, ts)
	c.join("1")
	for i, size := range []int{1 << 20, 2<<20 + 12345} {
		body := strings.Repeat("abcdefgh", size/8) + fmt.Sprintf("%08d", i)
		ref := fmt.Sprint(i + 2)
		msg := []byte(`["1","` + ref + `","room:lobby","big","` + body + `"]`)
		if i == 0 {
			c.write(clientFrame(0x1, true, msg, 0xdeadbeef))
		} else {
			// Three fragments with a ping between them.
			a, b := len(msg)/3, 2*len(msg)/3
			c.write(clientFrame(0x1, false, msg[:a], 1))
			c.write(clientFrame(0x9, true, []byte("p"), 2))
			c.write(clientFrame(0x0, false, msg[a:b], 3))
			c.write(clientFrame(0x0, true, msg[b:], 4))
			if op, p := c.readFrame(); op != 0xA || string(p) != "p" {
				t.Fatalf("pong: opcode %d %q", op, p)
			}
		}
		want := fmt.Sprintf(`["1","%s","room:lobby","phx_reply",{"status":"ok","response":{"len":%d,"tail":"%08d"}}]`, ref, len(body), i)
		c.expect(want)
	}
	c.write(clientFrame(0x1, true, bytes.Repeat([]byte("x"), 3<<20+1), 5))
	if op, p := c.readFrame(); op != 0x8 || binary.BigEndian.Uint16(p) != uint16(CloseTooBig) {
		t.Fatalf("over the limit: opcode %d %q, want close 1009", op, p)
	}
}

// readClose reads frames until a close frame and returns its code.
func (r *wsRaw) readClose() uint16 {
	r.t.Helper()
	for {
		op, p := r.readFrame()
		if op == 0x8 {
			if len(p) < 2 {
				return 0
			}
			return binary.BigEndian.Uint16(p)
		}
	}
}

// TestIdleSocketCloseHandshakes: an idle socket (no reading goroutine)
// completes every close: the client's close is answered, a server close
// with a code reaches the client and ends the socket whether the client
// answers it, drops the connection, or neither (the transport's close wakes
// the reader, which sees the end).
func TestIdleSocketCloseHandshakes(t *testing.T) {
	ts := roomServer(t, echoHandler(), EndpointConfig{})
	idle := 0
	open := func() (*wsRaw, string) {
		c := dialWS(t, ts)
		c.join("1")
		idle++
		if runtime.GOOS == "linux" {
			waitIdle(t, ts.tr, idle)
		}
		ev := ts.tr.Filter(trace.Kind("socket.open"))
		return c, ev[len(ev)-1].Get("socket").(string)
	}
	ended := func(id string) { waitTrace(t, ts.tr, trace.Kind("socket.end", "socket", id)) }

	t.Run("client close", func(t *testing.T) {
		c, id := open()
		c.write(clientFrame(0x8, true, binary.BigEndian.AppendUint16(nil, 1000), 7))
		if code := c.readClose(); code != 1000 {
			t.Fatalf("close echo %d, want 1000", code)
		}
		ended(id)
	})
	t.Run("server close answered", func(t *testing.T) {
		c, id := open()
		ts.ep.Disconnect(id)
		if code := c.readClose(); code != uint16(CloseGoingAway) {
			t.Fatalf("close %d, want 1001", code)
		}
		c.write(clientFrame(0x8, true, binary.BigEndian.AppendUint16(nil, uint16(CloseGoingAway)), 7))
		ended(id)
	})
	t.Run("server close, connection dropped", func(t *testing.T) {
		c, id := open()
		ts.ep.Disconnect(id)
		if code := c.readClose(); code != uint16(CloseGoingAway) {
			t.Fatalf("close %d, want 1001", code)
		}
		_ = c.c.Close()
		ended(id)
	})
	t.Run("server close never answered", func(t *testing.T) {
		c, id := open()
		ts.ep.Disconnect(id)
		if code := c.readClose(); code != uint16(CloseGoingAway) {
			t.Fatalf("close %d, want 1001", code)
		}
		ended(id) // after closeHandshakeTimeout, the transport drops it
	})
}

// TestIdleSocketHeartbeatTimeout: a silent socket with no reading goroutine
// (one that never sent a frame is polled from its upgrade on) is still
// closed (1001) when its heartbeat timeout passes, and ends.
func TestIdleSocketHeartbeatTimeout(t *testing.T) {
	ts := roomServer(t, newFuncHandler(), EndpointConfig{HeartbeatTimeout: 50e6})
	c := dialWS(t, ts)
	if code := c.readClose(); code != uint16(CloseGoingAway) {
		t.Fatalf("close %d, want 1001", code)
	}
	waitTrace(t, ts.tr, trace.Kind("socket.idle"))
	c.write(clientFrame(0x8, true, binary.BigEndian.AppendUint16(nil, uint16(CloseGoingAway)), 7))
	waitTrace(t, ts.tr, trace.Kind("socket.end"))
}

// FuzzSocketReader writes a stream of client frames (messages, fragmented
// messages, pings) to a socket in pieces cut where the input says, and
// checks that every message is read whole and in order: each is a push
// whose echo reply carries exactly the bytes sent (what the reader accepts
// is what the handler stores and replays).
func FuzzSocketReader(f *testing.F) {
	f.Add([]byte("hello"), []byte{1, 5, 200}, uint8(3))
	f.Add([]byte(strings.Repeat("z", 3000)), []byte{0, 0, 1}, uint8(7))
	f.Add([]byte(""), []byte{}, uint8(0))
	f.Fuzz(fuzzSocketReader)
}

func fuzzSocketReader(t *testing.T, text []byte, cuts []byte, mode uint8) {
	{
		ts := roomServer(t, echoHandler(), EndpointConfig{})
		c := dialWS(t, ts)
		c.join("1")
		enc, _ := json.Marshal(map[string]string{"s": string(text)})
		var stream []byte
		var wants []string
		for i := 0; i < 3; i++ {
			ref := fmt.Sprint(i + 2)
			msg := []byte(`["1","` + ref + `","room:lobby","echo",` + string(enc) + `]`)
			wants = append(wants, `["1","`+ref+`","room:lobby","phx_reply",{"status":"ok","response":`+string(enc)+`}]`)
			key := uint32(mode)*0x01010101 + uint32(i)
			switch (int(mode) + i) % 3 {
			case 0:
				stream = append(stream, clientFrame(0x1, true, msg, key)...)
			case 1: // fragmented with a ping between the fragments
				h := len(msg) / 2
				stream = append(stream, clientFrame(0x1, false, msg[:h], key)...)
				stream = append(stream, clientFrame(0x9, true, []byte("pi"), key)...)
				stream = append(stream, clientFrame(0x0, true, msg[h:], key)...)
			default: // ping first
				stream = append(stream, clientFrame(0x9, true, nil, key)...)
				stream = append(stream, clientFrame(0x1, true, msg, key)...)
			}
		}
		// Cut the stream into pieces.
		rest := stream
		for _, cut := range cuts {
			if len(rest) == 0 {
				break
			}
			n := min(int(cut)+1, len(rest))
			c.write(rest[:n])
			rest = rest[n:]
		}
		c.write(rest)
		got := 0
		for got < len(wants) {
			op, p := c.readFrame()
			switch op {
			case 0xA: // pong
				continue
			case 0x1:
				if string(p) != wants[got] {
					t.Fatalf("reply %d: %s, want %s", got, p, wants[got])
				}
				got++
			default:
				t.Fatalf("unexpected opcode %d %q", op, p)
			}
		}
	}
}

// TestSpuriousWakeGoesIdle: a wake with nothing to read (its bytes were read
// by the run before) does not leave a goroutine waiting in the library for
// the next message: the run sees no input, re-arms and goes idle, and the
// socket is still read afterwards.
func TestSpuriousWakeGoesIdle(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the read poller is Linux only")
	}
	ts := roomServer(t, echoHandler(), EndpointConfig{})
	c := dialWS(t, ts)
	c.join("1")
	waitIdle(t, ts.tr, 1)
	id := ts.tr.Filter(trace.Kind("socket.open"))[0].Get("socket").(string)
	r := ts.ep.Socket(id).t.(pollTransport).r
	r.wake()
	waitTrace(t, ts.tr, trace.Kind("socket.read_spurious", "socket", id))
	waitIdle(t, ts.tr, 2)
	deadline := time.Now().Add(testTimeout)
	for n, _ := readerGoroutines(); n > 0 && time.Now().Before(deadline); n, _ = readerGoroutines() {
		runtime.Gosched()
	}
	if n, stacks := readerGoroutines(); n != 0 {
		t.Fatalf("%d reader goroutines after a spurious wake:\n%s", n, stacks)
	}
	c.send(`["1","2","room:lobby","echo",{"after":"wake"}]`)
	c.expect(`["1","2","room:lobby","phx_reply",{"status":"ok","response":{"after":"wake"}}]`)
}
