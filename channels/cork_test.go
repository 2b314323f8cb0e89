package channels

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

// serverFrame builds an unmasked server text frame with n payload bytes.
func serverFrame(n int, fill byte) []byte {
	out := []byte{0x81}
	switch {
	case n < 126:
		out = append(out, byte(n))
	case n < 1<<16:
		out = append(out, 126)
		out = binary.BigEndian.AppendUint16(out, uint16(n))
	default:
		out = append(out, 127)
		out = binary.BigEndian.AppendUint64(out, uint64(n))
	}
	return append(out, bytes.Repeat([]byte{fill}, n)...)
}

// A data write that expires part-way leaves its rest at the head of the
// stream: a pong written meanwhile is dropped (never glued to half a
// frame), and the close frame goes out only after the rest, so the reader
// sees whole frames and then the close frame.
func TestConnWriterFinishesTornWriteBeforeCloseFrame(t *testing.T) {
	server, client := net.Pipe()
	defer server.Close()
	defer client.Close()
	w := newConnWriter(server) // a pipe: every data write parks
	f1, f2 := serverFrame(70000, 'a'), serverFrame(300, 'b')
	done := make(chan error, 1)
	parked, err := w.writeData(append(append([]byte{}, f1...), f2...), nil, func(err error) { done <- err })
	if !parked || err != nil {
		t.Fatalf("writeData: parked %v, err %v", parked, err)
	}
	// The reader takes 1,000 bytes, then stops: the sweep expires the write.
	head := make([]byte, 1000)
	if _, err := io.ReadFull(client, head); err != nil {
		t.Fatal(err)
	}
	if !w.expireParked(monoNow() + 1) {
		t.Fatal("parked write not expired")
	}
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("parked write ended with %v, want a deadline error", err)
	}
	if n, err := w.Write([]byte{0x8a, 0x00}); n != 2 || err != nil { // a pong from the library
		t.Fatalf("pong after the failed write: %d %v", n, err)
	}
	all := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(client)
		all <- b
	}()
	if !w.closeFrame(CloseSlowConsumer, "slow consumer", time.Minute) {
		t.Fatal("close frame not written")
	}
	server.Close()
	stream := append(head, <-all...)
	want := append(append(append([]byte{}, f1...), f2...), 0x88, byte(2+len("slow consumer")), 0x03, 0xf5)
	want = append(want, "slow consumer"...)
	if !bytes.Equal(stream, want) {
		t.Fatalf("stream of %d bytes, want the two frames and the close frame (%d bytes)", len(stream), len(want))
	}
	if n, err := w.Write([]byte{0x88, 0x00}); n != 2 || err != nil { // the library's close: dropped
		t.Fatalf("write after the close frame: %d %v", n, err)
	}
}

// When the rest of a torn write cannot be finished, no close frame is
// written after it.
func TestConnWriterWritesNoCloseFrameAfterUnfinishedRest(t *testing.T) {
	server, client := net.Pipe()
	defer client.Close()
	w := newConnWriter(server)
	done := make(chan error, 1)
	if parked, _ := w.writeData(serverFrame(5000, 'a'), nil, func(err error) { done <- err }); !parked {
		t.Fatal("write to a pipe nobody reads did not park")
	}
	w.expireParked(monoNow() + 1)
	if err := <-done; err == nil {
		t.Fatal("parked write succeeded with no reader")
	}
	if w.closeFrame(CloseSlowConsumer, "slow consumer", 20*time.Millisecond) {
		t.Fatal("close frame reported written behind an unfinished frame")
	}
	server.Close()
}

// A client that stops reading while it floods pings does not grow the
// bytes held behind a stalled data write past a few KiB: pongs
// beyond it are dropped, a close frame still follows, and the reader sees
// the data frame, whole pongs and then the close frame.
func TestConnWriterBoundsPongsBehindStalledWrite(t *testing.T) {
	server, client := net.Pipe()
	defer server.Close()
	defer client.Close()
	w := newConnWriter(server) // a pipe: every data write parks
	data := serverFrame(70000, 'a')
	done := make(chan error, 1)
	parked, err := w.writeData(data, nil, func(err error) { done <- err })
	if !parked || err != nil {
		t.Fatalf("writeData: parked %v, err %v", parked, err)
	}
	pong := append([]byte{0x8a, 125}, bytes.Repeat([]byte{'p'}, 125)...)
	for i := 0; i < 10000; i++ { // 1.27 MB of pongs
		if n, err := w.Write(pong); n != len(pong) || err != nil {
			t.Fatalf("pong %d: %d %v", i, n, err)
		}
	}
	w.mu.Lock()
	held := len(w.out)
	w.mu.Unlock()
	if held > 64<<10 {
		t.Fatalf("%d bytes held behind the stalled write, want at most 64 KiB", held)
	}
	all := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(client)
		all <- b
	}()
	if err := <-done; err != nil {
		t.Fatalf("parked write: %v", err)
	}
	if !w.closeFrame(CloseSlowConsumer, "slow consumer", time.Minute) {
		t.Fatal("close frame not written")
	}
	server.Close()
	stream := <-all
	if !bytes.HasPrefix(stream, data) {
		t.Fatal("the stream does not start with the data frame")
	}
	rest := stream[len(data):]
	pongs := 0
	for bytes.HasPrefix(rest, pong) {
		rest = rest[len(pong):]
		pongs++
	}
	want := append([]byte{0x88, byte(2 + len("slow consumer")), 0x03, 0xf5}, "slow consumer"...)
	if pongs == 0 || !bytes.Equal(rest, want) {
		t.Fatalf("after the data frame: %d whole pongs, then %q; want pongs then the close frame", pongs, rest)
	}
}

// Data written while a control frame is blocked (the library's pong to a
// client that stopped reading) is parked, not reported written: the
// socket's writer keeps its frames in its bounded queue, and the sweep's
// expiry fails the stalled write and the data behind it.
func TestConnWriterParksDataBehindBlockedControlWrite(t *testing.T) {
	server, client := net.Pipe()
	defer server.Close()
	defer client.Close()
	w := newConnWriter(server)
	pong := []byte{0x8a, 0x00}
	pongDone := make(chan error, 1)
	go func() {
		_, err := w.Write(pong) // blocks: nobody reads the pipe
		pongDone <- err
	}()
	for {
		w.mu.Lock()
		busy := w.busy
		w.mu.Unlock()
		if busy {
			break
		}
		runtime.Gosched()
	}
	done := make(chan error, 1)
	parked, err := w.writeData(serverFrame(300, 'b'), nil, func(err error) { done <- err })
	if err != nil || !parked {
		t.Fatalf("data behind a blocked pong: parked %v, err %v; want parked", parked, err)
	}
	if !w.expireParked(monoNow() + 1) {
		t.Fatal("the data behind the pong was not expired")
	}
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("parked data ended with %v, want a deadline error", err)
	}
	if err := <-pongDone; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("pong ended with %v, want a deadline error", err)
	}
}
