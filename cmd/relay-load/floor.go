package main

// The floor: what one WebSocket text frame written to N sockets costs the
// writing process when nothing but the write is done. See docs/PERFORMANCE.md
// ("The floor"). The writer is this process; the N reading sockets live in a
// child process (this binary run as "floor-readers"), so that the writer's
// getrusage holds only the accepts, the handshakes and the writes, as
// readProcs does for a gateway.

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

// floorPayload is a session event push (a one-word delta) as the V2
// serializer sends it to a relay-load socket: 176 bytes.
const floorPayload = `[null,null,"session:load-1764600000-0","delta",{"session":"load-1764600000-0","epoch":1,"seq":1234,"type":"delta","data":{"text":"word"},"at":"2026-12-01T15:20:00.123456789Z"}]`

type floorOptions struct {
	sockets  int
	messages int
	rate     float64
	payload  int
	write    string
}

// floorMain runs "relay-load floor [flags]".
func floorMain(args []string) error {
	var o floorOptions
	fs := flag.NewFlagSet("floor", flag.ExitOnError)
	fs.IntVar(&o.sockets, "sockets", 10000, "number of loopback WebSockets")
	fs.IntVar(&o.messages, "messages", 150, "messages written to every socket")
	fs.Float64Var(&o.rate, "rate", 10, "messages per second (each written to every socket at once)")
	fs.IntVar(&o.payload, "payload", 0, "payload bytes (0: a 176-byte session event push, a one-word delta)")
	fs.StringVar(&o.write, "write", "raw", "raw: write(2) on the socket's fd, net.Conn.Write only if the kernel buffer is full; conn: net.Conn.Write")
	_ = fs.Parse(args)
	if o.write != "raw" && o.write != "conn" {
		return fmt.Errorf("-write must be raw or conn, not %q", o.write)
	}
	payload := []byte(floorPayload)
	if o.payload > 0 {
		payload = []byte(strings.Repeat("x", o.payload))
	}
	frame := textFrame(payload)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	conns := make(chan net.Conn, o.sockets)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := acceptWebSocket(w, r)
		if err != nil {
			return
		}
		conns <- c
	})}
	go func() { _ = srv.Serve(ln) }()

	child := exec.Command(os.Args[0], "floor-readers",
		"-url", "ws://"+ln.Addr().String()+"/",
		"-sockets", strconv.Itoa(o.sockets), "-messages", strconv.Itoa(o.messages))
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		return err
	}
	if err := child.Start(); err != nil {
		return err
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()

	socks := make([]floorSock, 0, o.sockets)
	timeout := time.After(5 * time.Minute)
	for len(socks) < o.sockets {
		select {
		case c := <-conns:
			s := floorSock{conn: c, fd: -1}
			if rc, err := c.(*net.TCPConn).SyscallConn(); err == nil {
				_ = rc.Control(func(fd uintptr) { s.fd = int(fd) })
			}
			socks = append(socks, s)
		case <-timeout:
			return fmt.Errorf("only %d of %d sockets connected", len(socks), o.sockets)
		}
	}
	_ = srv.Close() // no more handshakes; the hijacked connections stay open
	fmt.Printf("floor: %d sockets, %d-byte frame (%d-byte payload), %d messages at %.0f/s, write=%s\n",
		o.sockets, len(frame), len(payload), o.messages, o.rate, o.write)

	interval := time.Duration(float64(time.Second) / o.rate)
	var slow int64 // writes the kernel did not take whole
	ru0 := rusage()
	start := time.Now()
	next := start
	for m := 0; m < o.messages; m++ {
		for i := range socks {
			if o.write == "raw" {
				slow += socks[i].writeRaw(frame)
			} else if _, err := socks[i].conn.Write(frame); err != nil {
				return fmt.Errorf("write: %w", err)
			}
		}
		next = next.Add(interval)
		time.Sleep(time.Until(next))
	}
	elapsed := time.Since(start)
	cpu := rusage() - ru0
	for _, s := range socks {
		_ = s.conn.Close()
	}

	writes := int64(o.sockets) * int64(o.messages)
	sc := bufio.NewScanner(out)
	received := "?"
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "received "); ok {
			received = v
		}
	}
	fmt.Printf("writes: %d in %v (%d not taken whole by write(2)); readers received %s messages\n",
		writes, elapsed.Round(time.Millisecond), slow, received)
	fmt.Printf("writer CPU: %.2f s: %.2f µs per write\n", cpu.Seconds(), float64(cpu.Nanoseconds())/1e3/float64(writes))
	return nil
}

type floorSock struct {
	conn net.Conn
	fd   int
}

// writeRaw writes b with one write(2) on the socket's descriptor. If the
// kernel takes less (a full send buffer: EAGAIN on the non-blocking fd), the
// rest goes through net.Conn.Write, which waits in the poller. It reports 1
// in that case.
func (s *floorSock) writeRaw(b []byte) int64 {
	if s.fd >= 0 {
		n, err := syscall.Write(s.fd, b)
		if err == nil && n == len(b) {
			return 0
		}
		if n > 0 {
			b = b[n:]
		}
		if err != nil && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EINTR) {
			return 1
		}
	}
	_, _ = s.conn.Write(b)
	return 1
}

// textFrame builds an unmasked final text frame (RFC 6455 §5.2) holding p.
func textFrame(p []byte) []byte {
	var h []byte
	switch n := len(p); {
	case n < 126:
		h = []byte{0x81, byte(n)}
	case n < 1<<16:
		h = []byte{0x81, 126, byte(n >> 8), byte(n)}
	default:
		h = []byte{0x81, 127, 0, 0, 0, 0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	return append(h, p...)
}

// acceptWebSocket completes an RFC 6455 opening handshake by hand and hands
// back the raw connection.
func acceptWebSocket(w http.ResponseWriter, r *http.Request) (net.Conn, error) {
	key := r.Header.Get("Sec-WebSocket-Key")
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || key == "" {
		http.Error(w, "not a WebSocket handshake", http.StatusBadRequest)
		return nil, errors.New("not a WebSocket handshake")
	}
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, err
	}
	_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " +
		base64.StdEncoding.EncodeToString(sum[:]) + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// rusage is this process's user + system CPU time.
func rusage() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// floorReadersMain runs "relay-load floor-readers": the reading side of the
// floor, as the load tool's clients read (coder/websocket). It prints
// "received N" when every socket has read its messages or been closed.
func floorReadersMain(args []string) error {
	fs := flag.NewFlagSet("floor-readers", flag.ExitOnError)
	u := fs.String("url", "", "ws:// URL of the floor writer")
	n := fs.Int("sockets", 1, "number of sockets")
	msgs := fs.Int("messages", 1, "messages each socket expects")
	_ = fs.Parse(args)
	ctx := context.Background()
	var received atomic.Int64
	done := make(chan struct{}, *n)
	tick := time.NewTicker(time.Second / 2000)
	defer tick.Stop()
	for i := 0; i < *n; i++ {
		<-tick.C
		dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		conn, _, err := websocket.Dial(dctx, *u, nil)
		cancel()
		if err != nil {
			return fmt.Errorf("dial: %w", err)
		}
		go func() {
			defer func() { done <- struct{}{} }()
			defer conn.CloseNow()
			buf := make([]byte, 0, 1024)
			for got := 0; got < *msgs; got++ {
				var err error
				if buf, err = readMessage(ctx, conn, buf[:0]); err != nil {
					return
				}
				received.Add(1)
			}
		}()
	}
	for i := 0; i < *n; i++ {
		<-done
	}
	fmt.Printf("received %d\n", received.Load())
	return nil
}
