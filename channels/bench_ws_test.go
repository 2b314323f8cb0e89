package channels

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkWSWrite measures the WebSocket write path: b.N broadcasts of a
// typical session event to one socket over loopback, read by a raw client
// that skips frames without allocating, at most 512 frames behind. ns/op and
// allocs/op cover the hub, the queue, the writer and the client's read.
// Coalescing is off: with it, a socket written to without pause is written
// once per flush tick, and a sender held 512 frames ahead would measure the
// tick, not the write path.
func BenchmarkWSWrite(b *testing.B) {
	ts := newTestServer(b, EndpointConfig{QueueSize: 1 << 20, QueueBytes: 1 << 30, WriteCoalesce: -1}, map[string]Handler{"room:*": newFuncHandler()})
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.srv.URL, "http://"))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET /socket/websocket?vsn=2.0.0 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	br := bufio.NewReaderSize(conn, 64<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		b.Fatalf("upgrade: %v %v", resp, err)
	}
	if _, err := conn.Write(maskedText(`["3","3","room:lobby","phx_join",{}]`)); err != nil {
		b.Fatal(err)
	}
	// skip reads one frame's header and discards its payload.
	skip := func() error {
		var h [2]byte
		if _, err := io.ReadFull(br, h[:]); err != nil {
			return err
		}
		n := int64(h[1] & 0x7f)
		switch n {
		case 126:
			var l [2]byte
			if _, err := io.ReadFull(br, l[:]); err != nil {
				return err
			}
			n = int64(binary.BigEndian.Uint16(l[:]))
		case 127:
			var l [8]byte
			if _, err := io.ReadFull(br, l[:]); err != nil {
				return err
			}
			n = int64(binary.BigEndian.Uint64(l[:]))
		}
		_, err := br.Discard(int(n))
		return err
	}
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	if err := skip(); err != nil { // the join reply
		b.Fatal(err)
	}
	done := make(chan error, 1)
	var read atomic.Int64
	payload := json.RawMessage(benchPayload)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		for i := 0; i < b.N; i++ {
			if err := skip(); err != nil {
				done <- err
				return
			}
			read.Add(1)
		}
		done <- nil
	}()
	for i := 0; i < b.N; i++ {
		// Stay at most 512 frames ahead of the reader: a writer that keeps
		// up, not a backlog that grows until the socket is cut.
		for int64(i)-read.Load() > 512 {
			runtime.Gosched()
		}
		ts.ep.Hub().Broadcast("room:lobby", "delta", payload, nil)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
