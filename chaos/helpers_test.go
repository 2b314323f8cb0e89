package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/testkit/proctest"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/session/redisstore"
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
func replayLog(t *testing.T, c *proctest.Cluster, id string) []agent.Event {
	t.Helper()
	opts, err := redis.ParseURL(testenv.RedisServerURL())
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opts)
	defer rc.Close()
	log := redisstore.NewReplayLog(rc, redisstore.ReplayConfig{Prefix: c.Name + ":"})
	evs, _, err := log.Since(timeout(t, 10*time.Second), id, agent.Position{}, 0)
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
func loggedUserEvents(evs []agent.Event) map[string][]int64 {
	out := map[string][]int64{}
	for _, ev := range evs {
		if ev.Type == agent.TypeUserEvent {
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
func joinObserver(t *testing.T, c *proctest.Cluster, p *proctest.Proc, id string) *phxtest.Socket {
	t.Helper()
	ctx := timeout(t, 15*time.Second)
	s, err := phxtest.DialNode(ctx, p.URL(), c.Token())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if _, err := s.Join(ctx, "session:"+id, map[string]any{"last_event": map[string]int{"epoch": 0, "seq": 0}}); err != nil {
		t.Fatal(err)
	}
	return s
}

// dbRow is a session's lease and session store rows as Postgres holds them.
type dbRow struct {
	Owner           string
	Epoch           int64
	Remaining       time.Duration // expires_at - now() on the database clock
	CheckpointEpoch int64         // session_state.epoch
	Checkpoint      string        // the stored history's contents, space-separated
}

// readRow reads session id's lease row and its session store rows.
func readRow(t *testing.T, c *proctest.Cluster, id string) dbRow {
	t.Helper()
	ctx := timeout(t, 10*time.Second)
	conn := dbConn(t, ctx, c)
	var r dbRow
	var micros int64
	err := conn.QueryRow(ctx, `SELECT owner_node, epoch, (extract(epoch FROM expires_at - now()) * 1000000)::bigint
		FROM agent_leases WHERE agent_key = $1`, id).Scan(&r.Owner, &r.Epoch, &micros)
	if err != nil {
		t.Fatalf("lease row of %s: %v", id, err)
	}
	r.Remaining = time.Duration(micros) * time.Microsecond
	err = conn.QueryRow(ctx, `SELECT s.epoch, COALESCE(string_agg(convert_from(h.content, 'UTF8'), ' ' ORDER BY h.n), '')
		FROM session_state s LEFT JOIN session_history h ON h.key = s.key WHERE s.key = $1 GROUP BY s.epoch`, id).Scan(&r.CheckpointEpoch, &r.Checkpoint)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("session row of %s: %v", id, err)
	}
	return r
}

// liveLeases counts the lease rows held by any process of node name
// (owner "<name>/<incarnation>") that have not expired on the database
// clock.
func liveLeases(t *testing.T, c *proctest.Cluster, name string) int {
	t.Helper()
	ctx := timeout(t, 10*time.Second)
	conn := dbConn(t, ctx, c)
	var n int
	err := conn.QueryRow(ctx, `SELECT count(*) FROM agent_leases WHERE split_part(owner_node, '/', 1) = $1 AND expires_at > now()`, name).Scan(&n)
	if err != nil {
		t.Fatalf("live leases of %s: %v", name, err)
	}
	return n
}

// metric reads one unlabelled counter or gauge from p's /metrics.
func metric(t *testing.T, p *proctest.Proc, name string) float64 {
	t.Helper()
	req, _ := http.NewRequestWithContext(timeout(t, 10*time.Second), http.MethodGet, p.URL()+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %q", name, line)
			}
			return f
		}
	}
	t.Fatalf("metric %s not found on %s", name, p.Name())
	return 0
}

// waitMetric polls p's metric until it reaches want.
func waitMetric(t *testing.T, p *proctest.Proc, name string, want float64) {
	t.Helper()
	ctx := timeout(t, 20*time.Second)
	for metric(t, p, name) < want {
		select {
		case <-ctx.Done():
			t.Fatalf("%s on %s stayed below %v", name, p.Name(), want)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// setLease writes session id's lease row directly: held by owner for ttl
// (an impostor owner for forward tests).
func setLease(t *testing.T, c *proctest.Cluster, id, owner string, epoch int64, ttl time.Duration) {
	t.Helper()
	ctx := timeout(t, 10*time.Second)
	conn := dbConn(t, ctx, c)
	_, err := conn.Exec(ctx, `INSERT INTO agent_leases (agent_key, owner_node, epoch, expires_at)
		VALUES ($1, $2, $3, now() + $4::interval)
		ON CONFLICT (agent_key) DO UPDATE SET owner_node = EXCLUDED.owner_node, epoch = EXCLUDED.epoch, expires_at = EXCLUDED.expires_at`,
		id, owner, epoch, ttl)
	if err != nil {
		t.Fatal(err)
	}
}

// dbConn opens a connection to the cluster's database for the test's reads
// and writes of rows; it is closed when the test ends.
func dbConn(t *testing.T, ctx context.Context, c *proctest.Cluster) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, c.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
