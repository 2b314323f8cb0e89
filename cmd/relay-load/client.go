package main

import (
	"context"
	"encoding/json"
	"fmt"
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
}

func (c *client) run(ctx context.Context, joined chan<- error) {
	u, err := url.Parse(c.url)
	if err != nil {
		joined <- err
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
		joined <- fmt.Errorf("dial %s: %w", c.url, err)
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
		joined <- err
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
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			if !reported {
				joined <- fmt.Errorf("read before join reply: %w", err)
			}
			return
		}
		var frame [5]json.RawMessage
		if json.Unmarshal(data, &frame) != nil {
			continue
		}
		var event string
		_ = json.Unmarshal(frame[3], &event)
		switch event {
		case "phx_reply":
			if !reported && string(frame[1]) == `"1"` {
				reported = true
				var r struct {
					Status string `json:"status"`
				}
				_ = json.Unmarshal(frame[4], &r)
				if r.Status != "ok" {
					joined <- fmt.Errorf("join %s: %s", c.topic, frame[4])
					return
				}
				joined <- nil
			}
		case "user_event", "turn_started", "delta", "message", "turn_completed", "turn_failed":
			var ev struct {
				At time.Time `json:"at"`
			}
			if json.Unmarshal(frame[4], &ev) == nil && !ev.At.IsZero() {
				c.st.observe(time.Since(ev.At))
			}
		}
	}
}
