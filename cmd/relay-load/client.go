package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// client is one Phoenix V2 socket joined to one topic. It speaks the wire
// protocol directly (the load tool measures the server, not a client library).
type client struct {
	url, token, topic string
	st                *stats
	release           func() // called once the join outcome is reported (-dial-window); nil: none
}

// report sends the join outcome and frees the client's dial-window slot.
func (c *client) report(joined chan<- error, err error) {
	joined <- err
	if c.release != nil {
		c.release()
	}
}

func (c *client) run(ctx context.Context, joined chan<- error) {
	u, err := url.Parse(c.url)
	if err != nil {
		c.report(joined, err)
		return
	}
	q := u.Query()
	q.Set("token", c.token)
	q.Set("vsn", "2.0.0")
	u.RawQuery = q.Encode()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, _, err := websocket.Dial(dctx, u.String(), nil)
	cancel()
	if err != nil {
		c.report(joined, fmt.Errorf("dial %s: %w", c.url, err))
		return
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)

	var wmu sync.Mutex
	write := func(frame string) error {
		wmu.Lock()
		defer wmu.Unlock()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return conn.Write(wctx, websocket.MessageText, []byte(frame))
	}
	join := fmt.Sprintf(`["1","1",%q,"phx_join",{}]`, c.topic)
	if err := write(join); err != nil {
		c.report(joined, err)
		return
	}
	go func() { // heartbeat every 30 s, as phoenix.js does
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for ref := 2; ; ref++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = write(`[null,"` + strconv.Itoa(ref) + `","phoenix","heartbeat",{}]`)
			}
		}
	}()

	reported := false
	buf := make([]byte, 0, 1024)
	for {
		var err error
		buf, err = readMessage(ctx, conn, buf[:0])
		if err != nil {
			if !reported {
				c.report(joined, fmt.Errorf("read before join reply: %w", err))
			} else if ctx.Err() == nil {
				c.st.closed.Add(1)
			}
			return
		}
		// Session events carry "at"; time them without decoding the frame.
		if at, ok := eventTime(buf); ok {
			c.st.observe(time.Since(at))
			continue
		}
		if !reported && bytes.HasPrefix(buf, []byte(`["1","1",`)) && bytes.Contains(buf, []byte(`"phx_reply"`)) {
			reported = true
			if !bytes.Contains(buf, []byte(`"status":"ok"`)) {
				c.report(joined, fmt.Errorf("join %s: %s", c.topic, buf))
				return
			}
			c.report(joined, nil)
		}
	}
}

// readMessage reads one WebSocket message into buf (reused between calls).
func readMessage(ctx context.Context, conn *websocket.Conn, buf []byte) ([]byte, error) {
	_, r, err := conn.Reader(ctx)
	if err != nil {
		return buf, err
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

var atKey = []byte(`"at":"`)

// eventTime finds the "at" stamp of a session event frame.
func eventTime(frame []byte) (time.Time, bool) {
	i := bytes.LastIndex(frame, atKey)
	if i < 0 {
		return time.Time{}, false
	}
	rest := frame[i+len(atKey):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(rest[:j]))
	return t, err == nil
}
