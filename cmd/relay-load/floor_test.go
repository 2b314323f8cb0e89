package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestFloorFramesReadByClient checks the floor's handshake and frames with
// the client library the load tool reads with: every payload length class of
// RFC 6455 (7-bit, 16-bit and 64-bit lengths) arrives whole.
func TestFloorFramesReadByClient(t *testing.T) {
	conns := make(chan net.Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := acceptWebSocket(w, r)
		if err != nil {
			t.Error(err)
			return
		}
		conns <- c
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.CloseNow()
	client.SetReadLimit(1 << 20)
	server := <-conns
	defer server.Close()
	for _, n := range []int{0, 1, 125, 126, 65535, 65536, 70000} {
		p := bytes.Repeat([]byte{'a' + byte(n%26)}, n)
		go func() { _, _ = server.Write(textFrame(p)) }()
		typ, got, err := client.Read(ctx)
		if err != nil {
			t.Fatalf("payload of %d bytes: %v", n, err)
		}
		if typ != websocket.MessageText || !bytes.Equal(got, p) {
			t.Fatalf("payload of %d bytes: got type %v, %d bytes", n, typ, len(got))
		}
	}
}
