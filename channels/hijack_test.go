package channels

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPipelinedFrameAfterHandshake: a client that sends its first frame in
// the same TCP write as the upgrade request still has it read, although the
// connection's buffers are swapped for smaller ones at the upgrade.
func TestPipelinedFrameAfterHandshake(t *testing.T) {
	ts := newTestServer(t, EndpointConfig{}, nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var req bytes.Buffer
	req.WriteString("GET /socket/websocket?vsn=2.0.0 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	req.Write(maskedText(`[null,"1","phoenix","heartbeat",{}]`))
	if _, err := conn.Write(req.Bytes()); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(testTimeout))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	hdr := make([]byte, 2)
	if _, err := io.ReadFull(br, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, hdr[1]&0x7f)
	if _, err := io.ReadFull(br, body); err != nil {
		t.Fatal(err)
	}
	if want := `[null,"1","phoenix","phx_reply",{"status":"ok","response":{}}]`; string(body) != want {
		t.Fatalf("reply %s, want %s", body, want)
	}
}

// maskedText builds a masked client text frame (RFC 6455 §5.2) of < 126 bytes.
func maskedText(s string) []byte {
	key := [4]byte{1, 2, 3, 4}
	out := []byte{0x81, 0x80 | byte(len(s))}
	out = binary.BigEndian.AppendUint32(out, binary.BigEndian.Uint32(key[:]))
	for i := 0; i < len(s); i++ {
		out = append(out, s[i]^key[i%4])
	}
	return out
}
