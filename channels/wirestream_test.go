package channels

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// wsFrame is one frame of a server byte stream as parseServerFrame read it.
type wsFrame struct {
	op      byte
	payload []byte
}

// parseServerFrame reads one frame of a server's WebSocket byte stream and
// checks it against RFC 6455 §5 independently of the code under test: FIN
// set (the server never fragments), RSV bits clear (no extension), a known
// opcode, no mask, the minimal length encoding (§5.2), control frames of
// at most 125 bytes (§5.5), text frames valid UTF-8 (§8.1) and close
// frames with no payload or a valid code and UTF-8 reason (§5.5.1, §7.4).
// io.EOF means the stream ended between frames; any other error is a
// broken stream.
func parseServerFrame(r io.Reader) (wsFrame, error) {
	var h [2]byte
	if n, err := io.ReadFull(r, h[:]); err != nil {
		if n == 0 && errors.Is(err, io.EOF) {
			return wsFrame{}, io.EOF
		}
		return wsFrame{}, fmt.Errorf("torn header: %w", err)
	}
	if h[0]&0x80 == 0 {
		return wsFrame{}, fmt.Errorf("fragmented frame (FIN clear), first byte %#x", h[0])
	}
	if h[0]&0x70 != 0 {
		return wsFrame{}, fmt.Errorf("RSV bits set: %#x", h[0])
	}
	op := h[0] & 0x0f
	switch op {
	case 0x1, 0x2, 0x8, 0x9, 0xa:
	default:
		return wsFrame{}, fmt.Errorf("opcode %#x", op)
	}
	if h[1]&0x80 != 0 {
		return wsFrame{}, errors.New("masked server frame")
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return wsFrame{}, fmt.Errorf("torn length: %w", err)
		}
		if n = uint64(binary.BigEndian.Uint16(l[:])); n < 126 {
			return wsFrame{}, fmt.Errorf("16-bit length %d is not minimal", n)
		}
	case 127:
		var l [8]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return wsFrame{}, fmt.Errorf("torn length: %w", err)
		}
		if n = binary.BigEndian.Uint64(l[:]); n <= 0xffff || n>>63 != 0 {
			return wsFrame{}, fmt.Errorf("64-bit length %d is not minimal or too large", n)
		}
	}
	if op >= 0x8 && n > 125 {
		return wsFrame{}, fmt.Errorf("control frame %#x of %d bytes", op, n)
	}
	if n > 64<<20 {
		return wsFrame{}, fmt.Errorf("frame of %d bytes", n)
	}
	p := make([]byte, n)
	if got, err := io.ReadFull(r, p); err != nil {
		return wsFrame{}, fmt.Errorf("torn frame: %d of %d payload bytes: %w", got, n, err)
	}
	switch op {
	case 0x1:
		if !utf8.Valid(p) {
			return wsFrame{}, errors.New("text frame not UTF-8")
		}
	case 0x8:
		if len(p) == 1 {
			return wsFrame{}, errors.New("close frame of 1 byte")
		}
		if len(p) >= 2 {
			code := binary.BigEndian.Uint16(p)
			if code < 1000 || code == 1004 || code == 1005 || code == 1006 || (code > 1014 && code < 3000) || code > 4999 {
				return wsFrame{}, fmt.Errorf("close code %d", code)
			}
			if !utf8.Valid(p[2:]) {
				return wsFrame{}, errors.New("close reason not UTF-8")
			}
		}
	}
	return wsFrame{op: op, payload: p}, nil
}

// streamScript drives one socket from a byte script: broadcasts (small and
// large), heartbeats, pushes answered with replies, pings, a reader that
// stalls and resumes, and a close by the server; then the client closes.
// It returns the problems found in the byte stream the socket emitted.
type streamScript struct {
	t  *testing.T
	ts *testServer
	c  net.Conn

	stall stallReader // the stream, read when not stalled

	sendMu     sync.Mutex
	closedSent bool // the client sent its close frame: it sends nothing more

	mu     sync.Mutex
	frames []wsFrame
	err    error // the stream's first parse error, or nil at a clean EOF
	seen   chan string
}

// Ops of the script, one byte each (some take the next byte as argument).
const (
	opBroadcast = iota
	opBigBroadcast
	opHeartbeat
	opPush
	opPing
	opStall
	opServerClose
	opCount
)

func runStreamScript(t *testing.T, script []byte) {
	h := newFuncHandler()
	h.handleIn = func(_ context.Context, ch *Channel, event string, payload json.RawMessage) (any, error) {
		if event == "end" {
			// The end marker: broadcast once the server has read and
			// handled everything the client sent before it.
			ch.sock.ep.Hub().Broadcast("room:x", "end", json.RawMessage(`{}`), nil)
		}
		return payload, nil
	}
	ts := newTestServer(t, EndpointConfig{
		QueueSize:   256,
		QueueBytes:  1 << 20,
		UnsentBytes: 4096, // writes park as soon as a few KiB are unread
	}, map[string]Handler{"room:*": h})
	d := net.Dialer{Timeout: testTimeout}
	conn, err := d.Dial("tcp", strings.TrimPrefix(ts.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	_ = conn.SetDeadline(time.Now().Add(testTimeout))
	_, err = io.WriteString(conn, "GET /socket/websocket?vsn=2.0.0 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	sc := &streamScript{t: t, ts: ts, c: conn, seen: make(chan string, 1<<16)}
	readDone := make(chan struct{})
	go sc.read(br, readDone)
	send := sc.send
	send(0x1, []byte(`["1","1","room:x","phx_join",{}]`))
	sc.await(`reply:1`)

	var pings [][]byte
	broadcasts, heartbeats, pushes := 0, 0, 0
	stalled, serverClosed := false, false
	ref := 10
	for i := 0; i < len(script); i++ {
		arg := byte(0)
		if i+1 < len(script) {
			arg = script[i+1]
		}
		switch script[i] % opCount {
		case opBroadcast, opBigBroadcast:
			size := int(arg % 64)
			if script[i]%opCount == opBigBroadcast {
				size = int(arg) * 64
				i++
			}
			payload := fmt.Sprintf(`{"n":%d,"pad":%q}`, broadcasts, strings.Repeat("x", size))
			ts.ep.Hub().Broadcast("room:x", "ev", json.RawMessage(payload), nil)
			broadcasts++
		case opHeartbeat:
			ref++
			send(0x1, []byte(`[null,"`+strconv.Itoa(ref)+`","phoenix","heartbeat",{}]`))
			heartbeats++
		case opPush:
			ref++
			send(0x1, []byte(`["1","`+strconv.Itoa(ref)+`","room:x","echo",{"r":`+strconv.Itoa(ref)+`}]`))
			pushes++
		case opPing:
			p := strconv.AppendInt(nil, int64(len(pings)), 10)
			p = append(p, bytes.Repeat([]byte{'p'}, int(arg%100))...)
			pings = append(pings, p)
			send(0x9, p)
			i++
		case opStall:
			stalled = !stalled
			sc.stall.setStalled(stalled)
		case opServerClose:
			if !serverClosed {
				serverClosed = true
				ts.ep.mu.Lock()
				var ids []string
				for id := range ts.ep.sockets {
					ids = append(ids, id)
				}
				ts.ep.mu.Unlock()
				for _, id := range ids {
					ts.ep.Disconnect(id)
				}
			}
		}
	}
	sc.stall.setStalled(false)
	// Once the end marker arrives, every earlier broadcast, pong and reply
	// was written (replies and pongs are queued or written as the server
	// reads the client's frames, before it reads this push).
	ref++
	send(0x1, []byte(`["1","`+strconv.Itoa(ref)+`","room:x","end",{}]`))
	pushes++
	gotEnd := serverClosed || sc.awaitOrClosed(readDone, "end", "reply:"+strconv.Itoa(ref))
	send(0x8, []byte{0x03, 0xe8}) // 1000
	<-readDone

	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.err != nil {
		t.Fatalf("byte stream broken after %d whole frames: %v", len(sc.frames), sc.err)
	}
	fs := sc.frames
	if len(fs) == 0 || fs[len(fs)-1].op != 0x8 {
		t.Fatalf("stream of %d frames does not end with a close frame", len(fs))
	}
	closes, lastN, pongs, replies := 0, -1, 0, 0
	cut := serverClosed || !gotEnd
	lastReply := map[string]int{} // by topic: a channel's replies and the heartbeat replies are each in order
	for _, f := range fs {
		switch f.op {
		case 0x8:
			closes++
			if len(f.payload) >= 2 {
				code := CloseCode(binary.BigEndian.Uint16(f.payload))
				if code != 1000 && code != CloseGoingAway && code != CloseSlowConsumer {
					t.Errorf("close code %d", code)
				}
				cut = cut || code != 1000
			}
		case 0xa:
			if pongs >= len(pings) || !bytes.Equal(f.payload, pings[pongs]) {
				t.Fatalf("pong %d %q does not answer ping %d in order", pongs, f.payload, pongs)
			}
			pongs++
		case 0x9:
			t.Fatalf("server sent a ping")
		case 0x1:
			var m []json.RawMessage
			if err := json.Unmarshal(f.payload, &m); err != nil || len(m) != 5 {
				t.Fatalf("text frame %q is not a V2 message", f.payload)
			}
			var event string
			_ = json.Unmarshal(m[3], &event)
			switch event {
			case "ev":
				var p struct{ N int }
				_ = json.Unmarshal(m[4], &p)
				if p.N <= lastN {
					t.Fatalf("broadcast %d after %d: out of order or twice", p.N, lastN)
				}
				if !cut && p.N != lastN+1 {
					t.Fatalf("broadcast %d after %d: one missing", p.N, lastN)
				}
				lastN = p.N
			case "phx_reply":
				var r, topic string
				_ = json.Unmarshal(m[1], &r)
				_ = json.Unmarshal(m[2], &topic)
				n, _ := strconv.Atoi(r)
				if n <= lastReply[topic] {
					t.Fatalf("%s reply %d after %d", topic, n, lastReply[topic])
				}
				lastReply[topic] = n
				replies++
			}
		}
	}
	if closes != 1 {
		t.Fatalf("%d close frames, want exactly 1, and last", closes)
	}
	if !cut {
		if lastN != broadcasts-1 {
			t.Fatalf("last broadcast %d of %d", lastN, broadcasts)
		}
		if pongs != len(pings) {
			t.Fatalf("%d pongs for %d pings", pongs, len(pings))
		}
		if replies != 1+heartbeats+pushes {
			t.Fatalf("%d replies for a join, %d heartbeats and %d pushes", replies, heartbeats, pushes)
		}
	}
}

// read parses the stream until its end, recording frames; a frame after the
// close frame is a parse error of its own.
func (sc *streamScript) read(br *bufio.Reader, done chan struct{}) {
	defer close(done)
	r := &sc.stall
	r.r = br
	closed := false
	for {
		f, err := parseServerFrame(r)
		sc.mu.Lock()
		if err == nil && closed {
			err = fmt.Errorf("frame %#x after the close frame", f.op)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				sc.err = err
			}
			sc.mu.Unlock()
			return
		}
		sc.frames = append(sc.frames, f)
		sc.mu.Unlock()
		switch f.op {
		case 0x8:
			closed = true
			// Answer the server's close (unless the client's own close
			// crossed it).
			sc.send(0x8, nil)
		case 0x1:
			var m []json.RawMessage
			if json.Unmarshal(f.payload, &m) == nil && len(m) == 5 {
				var ev, r string
				_ = json.Unmarshal(m[3], &ev)
				_ = json.Unmarshal(m[1], &r)
				if ev == "phx_reply" {
					ev = "reply:" + r
				}
				sc.seen <- ev
			}
		}
	}
}

// send writes a masked client frame. After its close frame the client
// sends nothing: the server may have closed the connection, and bytes
// arriving then would reset it, erasing the end of the stream.
func (sc *streamScript) send(op byte, p []byte) {
	sc.sendMu.Lock()
	defer sc.sendMu.Unlock()
	if sc.closedSent {
		return
	}
	sc.closedSent = op == 0x8
	if err := (&rawClient{conn: sc.c}).send(op, true, p); err != nil {
		sc.t.Errorf("client write: %v", err)
	}
}

// await waits for the event (or "reply:<ref>") to be read.
func (sc *streamScript) await(ev string) {
	sc.t.Helper()
	if !sc.awaitOrClosed(nil, ev) {
		sc.t.Fatalf("%s never arrived", ev)
	}
}

// awaitOrClosed waits for every one of evs, in any order; false when the
// stream ended (done closed) or testTimeout passed first.
func (sc *streamScript) awaitOrClosed(done chan struct{}, evs ...string) bool {
	want := map[string]bool{}
	for _, ev := range evs {
		want[ev] = true
	}
	timeout := time.After(testTimeout)
	for len(want) > 0 {
		select {
		case got := <-sc.seen:
			delete(want, got)
		case <-done:
			for len(want) > 0 {
				select {
				case got := <-sc.seen:
					delete(want, got)
				default:
					return false
				}
			}
		case <-timeout:
			return false
		}
	}
	return true
}

// stallReader reads from r only while not stalled.
type stallReader struct {
	r  io.Reader
	mu sync.Mutex
	// resume is open while stalled and closed when reading resumes.
	resume chan struct{}
}

func (s *stallReader) setStalled(stalled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if stalled && s.resume == nil {
		s.resume = make(chan struct{})
	} else if !stalled && s.resume != nil {
		close(s.resume)
		s.resume = nil
	}
}

func (s *stallReader) Read(p []byte) (int, error) {
	s.mu.Lock()
	resume := s.resume
	s.mu.Unlock()
	if resume != nil {
		<-resume
	}
	return s.r.Read(p)
}

// FuzzSocketByteStream: whatever the interleaving of broadcasts (framed
// once, written by the write workers), replies and heartbeat replies (the
// control lane), pongs (written by the WebSocket library), a reader that
// stalls (writes park) and closes from either side, the bytes a socket
// emits are whole, valid RFC 6455 frames, in order, with one close frame
// and nothing after it; with no close by the server, nothing is missing.
func FuzzSocketByteStream(f *testing.F) {
	f.Add([]byte{opBroadcast, 3, opPing, 5, opHeartbeat, opBroadcast, 70, opPush})
	f.Add([]byte{opStall, opBigBroadcast, 200, opPing, 100, opHeartbeat, opBigBroadcast, 255, opPing, 1, opStall, opBroadcast, 1})
	f.Add([]byte{opBroadcast, 1, opServerClose, opBroadcast, 2, opPing, 9})
	f.Add([]byte{opStall, opBigBroadcast, 255, opBigBroadcast, 255, opBigBroadcast, 255, opBigBroadcast, 255, opPing, 3, opServerClose, opStall})
	// A stalled reader: writes park, pongs and replies queue behind them.
	parks := []byte{opStall}
	for i := range 12 {
		parks = append(parks, opBigBroadcast, 255, opPing, byte(i), opHeartbeat, opPush)
	}
	f.Add(append(parks, opStall, opBroadcast))
	r := rand.New(rand.NewPCG(14, 6455))
	for range 4 {
		s := make([]byte, 40)
		for i := range s {
			s[i] = byte(r.IntN(256))
		}
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, script []byte) {
		if len(script) > 200 {
			script = script[:200]
		}
		runStreamScript(t, script)
	})
}

// A frame is framed with the shortest length encoding for each size, the
// shared form is built once (every socket gets the same bytes) and equals
// the unshared one, and the independent parser reads back what was framed.
func TestWSFrameEncodings(t *testing.T) {
	for _, n := range []int{0, 1, 125, 126, 65535, 65536, 1 << 20} {
		for _, bin := range []bool{false, true} {
			data := bytes.Repeat([]byte{'a'}, n)
			shared := Frame{Data: data, Binary: bin, wire: new(wireCache)}
			a, b := shared.wsBytes(), shared.wsBytes()
			if &a[0] != &b[0] {
				t.Fatalf("%d bytes: the shared frame was built twice", n)
			}
			plain := Frame{Data: data, Binary: bin}
			if !bytes.Equal(a, plain.wsBytes()) || !bytes.Equal(a, appendWSFrame(nil, &shared)) {
				t.Fatalf("%d bytes: shared and unshared framings differ", n)
			}
			if want := wsHeaderLen(n) + n; len(a) != want {
				t.Fatalf("%d bytes framed in %d, want %d", n, len(a), want)
			}
			f, err := parseServerFrame(bytes.NewReader(a))
			wantOp := byte(0x1)
			if bin {
				wantOp = 0x2
			}
			if err != nil || f.op != wantOp || !bytes.Equal(f.payload, data) {
				t.Fatalf("%d bytes: parsed op %#x, %d bytes, err %v", n, f.op, len(f.payload), err)
			}
		}
	}
}
