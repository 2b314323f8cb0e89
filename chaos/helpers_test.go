package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/relaygw/relay/internal/proctest"
	"github.com/relaygw/relay/internal/testenv"
	"github.com/relaygw/relay/session"
)

// newCluster is proctest.NewCluster with the package's binary.
func newCluster(t *testing.T, env map[string]string) *proctest.Cluster {
	t.Helper()
	return proctest.NewCluster(t, gatewayBin, env)
}

// timeout returns a context ending after d or at the end of the test.
func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// post posts ev once and fails the test when no HTTP answer comes.
func post(t *testing.T, c *proctest.Cluster, p *proctest.Proc, id string, ev proctest.Event) proctest.Reply {
	t.Helper()
	r, err := c.Client().PostEvent(timeout(t, 20*time.Second), p.URL(), id, ev)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// mustAccept posts ev once and fails the test unless it is accepted.
func mustAccept(t *testing.T, c *proctest.Cluster, p *proctest.Proc, id string, ev proctest.Event) proctest.Accepted {
	t.Helper()
	r := post(t, c, p, id, ev)
	if r.Accepted == nil {
		t.Fatalf("post %q to %s: %v", ev.Text, p.Name(), r)
	}
	return *r.Accepted
}

// waitView polls GET /api/sessions/{id} on p until ok holds (an eventual
// condition: a turn finishing on whichever node owns the session).
func waitView(t *testing.T, c *proctest.Cluster, p *proctest.Proc, id string, what string, ok func(proctest.SessionView) bool) proctest.SessionView {
	t.Helper()
	ctx := timeout(t, 30*time.Second)
	var v proctest.SessionView
	var err error
	for {
		v, err = c.Client().GetSession(ctx, p.URL(), id)
		if err == nil && ok(v) {
			return v
		}
		select {
		case <-ctx.Done():
			t.Fatalf("session %s on %s: waiting for %s: last view %+v, err %v", id, p.Name(), what, v, err)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// turnsDone reports whether history holds n finished turns (user +
// assistant each).
func turnsDone(n int) func(proctest.SessionView) bool {
	return func(v proctest.SessionView) bool {
		done := 0
		for _, m := range v.History {
			if m.Role == "assistant" {
				done++
			}
		}
		return done >= n
	}
}

// userCounts counts each user message of a history.
func userCounts(h []proctest.Message) map[string]int {
	out := map[string]int{}
	for _, m := range h {
		if m.Role == "user" {
			out[m.Content]++
		}
	}
	return out
}

// replayLog reads session id's whole replay log from Redis.
func replayLog(t *testing.T, c *proctest.Cluster, id string) []session.Event {
	t.Helper()
	opts, err := redis.ParseURL(testenv.RedisServerURL())
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opts)
	defer rc.Close()
	log := session.NewRedisReplayLog(rc, session.RedisReplayConfig{Prefix: c.Name + ":"})
	evs, _, err := log.Since(timeout(t, 10*time.Second), id, session.Position{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// userEventText returns the text of a user_event's data
// ({"type":…,"data":{"text":…}}).
func userEventText(data json.RawMessage) string {
	var d struct {
		Data struct {
			Text string `json:"text"`
		} `json:"data"`
	}
	_ = json.Unmarshal(data, &d)
	return d.Data.Text
}

// loggedUserEvents counts the log's user_events by text, per epoch.
func loggedUserEvents(evs []session.Event) map[string][]int64 {
	out := map[string][]int64{}
	for _, ev := range evs {
		if ev.Type == session.TypeUserEvent {
			txt := userEventText(ev.Data)
			out[txt] = append(out[txt], ev.Epoch)
		}
	}
	return out
}

// words returns n words "<prefix>1 <prefix>2 …".
func words(prefix string, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("%s%d", prefix, i+1)
	}
	return strings.Join(w, " ")
}

// joinObserver opens a raw socket on p and joins session id from the start
// of its log.
func joinObserver(t *testing.T, c *proctest.Cluster, p *proctest.Proc, id string) *proctest.Socket {
	t.Helper()
	ctx := timeout(t, 15*time.Second)
	s, err := proctest.DialSocket(ctx, p.URL(), c.Token())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if _, err := s.Join(ctx, "session:"+id, map[string]any{"last_event": map[string]int{"epoch": 0, "seq": 0}}); err != nil {
		t.Fatal(err)
	}
	return s
}
