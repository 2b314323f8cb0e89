package channels

import (
	"bytes"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
)

// BenchmarkIdleSocketMemory opens 500 WebSocket sockets over loopback, each
// joined to a topic, and reports the server's heap+stack bytes per idle
// socket. The clients are bare TCP connections speaking just enough
// WebSocket (one handshake, one masked frame) to keep their own memory out of
// the figure.
func BenchmarkIdleSocketMemory(b *testing.B) {
	const n = 500
	for b.Loop() {
		ts := newTestServer(b, EndpointConfig{}, map[string]Handler{"room:*": newFuncHandler()})
		addr := strings.TrimPrefix(ts.srv.URL, "http://")
		before := memInUse()
		conns := make([]net.Conn, n)
		for i := range conns {
			conns[i] = rawJoin(b, addr)
		}
		after := memInUse()
		b.ReportMetric(float64(after-before)/n, "B/socket")
		for _, c := range conns {
			_ = c.Close()
		}
	}
}

// rawJoin opens a WebSocket with a raw TCP connection, joins room:lobby and
// reads the join reply.
func rawJoin(tb testing.TB, addr string) net.Conn {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	req := "GET /socket/websocket?vsn=2.0.0 HTTP/1.1\r\nHost: " + addr +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		tb.Fatal(err)
	}
	var head []byte
	buf := make([]byte, 1)
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		if _, err := c.Read(buf); err != nil {
			tb.Fatalf("handshake: %v", err)
		}
		head = append(head, buf[0])
	}
	if !bytes.HasPrefix(head, []byte("HTTP/1.1 101")) {
		tb.Fatalf("handshake: %s", head)
	}
	payload := `["1","1","room:lobby","phx_join",{}]`
	frame := append([]byte{0x81, 0x80 | byte(len(payload)), 0, 0, 0, 0}, payload...) // zero mask
	if _, err := c.Write(frame); err != nil {
		tb.Fatal(err)
	}
	hdr := make([]byte, 2)
	if _, err := io.ReadFull(c, hdr); err != nil {
		tb.Fatal(err)
	}
	reply := make([]byte, hdr[1]&0x7f)
	if _, err := io.ReadFull(c, reply); err != nil {
		tb.Fatal(err)
	}
	if want := `["1","1","room:lobby","phx_reply",{"status":"ok","response":{}}]`; string(reply) != want {
		tb.Fatalf("join reply %s", reply)
	}
	return c
}

func memInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}
