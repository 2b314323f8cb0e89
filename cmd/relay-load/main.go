// Command relay-load drives many Phoenix-protocol sockets against one or more
// gateway nodes and measures what they see.
//
// It opens -sockets WebSockets spread round-robin over -ws URLs, joins each
// to one of -sessions session topics, then POSTs events to -post URLs at
// -rate events per second per session for -duration. Every session event a
// socket receives is timed against the event's "at" stamp (publish time on
// the owner; all processes share this machine's clock), giving publish→socket
// latency percentiles and deliveries per second. With -pids it also reads the
// gateways' RSS and CPU time from /proc, for memory per idle socket and CPU
// per delivered message.
//
// Example, one node, 1,000 sockets, one session, 20 deliveries/s per socket:
//
//	relay-load -ws ws://127.0.0.1:4000/socket/websocket -post http://127.0.0.1:4000 \
//	  -token $TOKEN -sockets 1000 -sessions 1 -rate 4 -duration 30s -pids $(pgrep gateway)
//
// Each POST of one word makes the echo agent emit five events (user_event,
// turn_started, delta, message, turn_completed), so -rate 4 gives 20 events/s.
// The tool stops by itself after -duration and only talks to the given URLs.
//
// "relay-load floor" measures the floor under a fan-out instead: the CPU one
// pre-framed WebSocket text frame costs per socket when the leanest loop writes
// it (one write syscall per socket per message), N loopback sockets read by a
// child process. See floor.go and docs/PERFORMANCE.md.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type options struct {
	ws, post         []string
	token            string
	sockets          int
	sessions         int
	prefix           string
	rate             float64
	duration         time.Duration
	connectRate      int
	hold             time.Duration
	pids             []int
	words            int
	retryOnDirective bool
	expect           int64 // with -rate < 0: end the window once this many deliveries arrived
	dialWindow       int   // most sockets dialing or joining at once (0: no bound)
}

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "floor" || os.Args[1] == "floor-readers") {
		f := floorMain
		if os.Args[1] == "floor-readers" {
			f = floorReadersMain
		}
		if err := f(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "relay-load:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	var ws, post, pids string
	flag.StringVar(&ws, "ws", "ws://127.0.0.1:4000/socket/websocket", "comma-separated socket URLs (sockets are spread round-robin)")
	flag.StringVar(&post, "post", "http://127.0.0.1:4000", "comma-separated base URLs to POST events to (round-robin)")
	flag.StringVar(&o.token, "token", os.Getenv("RELAY_TOKEN"), "JWT allowing the sessions (also used as the API bearer)")
	flag.IntVar(&o.sockets, "sockets", 100, "number of sockets")
	flag.IntVar(&o.sessions, "sessions", 1, "number of sessions; socket i joins session i mod sessions")
	flag.StringVar(&o.prefix, "prefix", fmt.Sprintf("load-%d", time.Now().Unix()), "session id prefix")
	flag.Float64Var(&o.rate, "rate", 4, "event POSTs per second per session (0: none, idle sockets; negative: post nothing but measure deliveries for -duration, for a second load process beside one that posts)")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "how long to post events")
	flag.IntVar(&o.connectRate, "connect-rate", 2000, "new sockets per second")
	flag.DurationVar(&o.hold, "hold", 0, "with -rate 0: how long to hold idle sockets before measuring")
	flag.StringVar(&pids, "pids", "", "comma-separated gateway pids to read RSS and CPU from /proc")
	flag.IntVar(&o.words, "words", 1, "words per posted message (the echo agent emits one delta per word)")
	flag.BoolVar(&o.retryOnDirective, "retry", true, "follow retry directives within their budget")
	flag.IntVar(&o.dialWindow, "dial-window", 0, "most sockets dialing or waiting for their join reply at once; dials wait for a free slot (0: no bound, dial at -connect-rate whatever the server's pace)")
	flag.Int64Var(&o.expect, "expect", 0, "with a negative -rate: end the measuring window as soon as this many deliveries arrived (-duration still bounds it), and report the time from the events' stamp to the last delivery")
	flag.Parse()
	o.ws, o.post = split(ws), split(post)
	for _, p := range split(pids) {
		var pid int
		if _, err := fmt.Sscan(p, &pid); err == nil {
			o.pids = append(o.pids, pid)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "relay-load:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func run(ctx context.Context, o options) error {
	if o.token == "" {
		return fmt.Errorf("-token (or RELAY_TOKEN) is required")
	}
	before := readProcs(o.pids)
	st := newStats()
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	joined := make(chan error, o.sockets)
	var window chan struct{} // -dial-window slots
	if o.dialWindow > 0 {
		window = make(chan struct{}, o.dialWindow)
	}
	tick := time.NewTicker(time.Second / time.Duration(max(1, o.connectRate)))
	for i := 0; i < o.sockets; i++ {
		<-tick.C
		c := &client{url: o.ws[i%len(o.ws)], token: o.token, topic: "session:" + sessionName(o, i%o.sessions), st: st}
		if window != nil {
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			c.release = func() { <-window }
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.run(ctx, joined)
		}()
	}
	tick.Stop()
	var joinErrs int
	for i := 0; i < o.sockets; i++ {
		select {
		case err := <-joined:
			if err != nil {
				joinErrs++
				if joinErrs <= 5 {
					fmt.Fprintln(os.Stderr, "join:", err)
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	fmt.Printf("sockets joined: %d of %d\n", o.sockets-joinErrs, o.sockets)
	afterJoin := readProcs(o.pids)
	if len(o.pids) > 0 && o.sockets-joinErrs > 0 {
		d := afterJoin.rss - before.rss
		fmt.Printf("gateway RSS: %.1f MiB before, %.1f MiB after joins: %.1f KiB per joined socket\n",
			mib(before.rss), mib(afterJoin.rss), float64(d)/1024/float64(o.sockets-joinErrs))
	}

	if o.rate == 0 {
		if o.hold > 0 {
			select {
			case <-time.After(o.hold):
			case <-ctx.Done():
			}
			h := readProcs(o.pids)
			if len(o.pids) > 0 {
				fmt.Printf("after %v idle: RSS %.1f MiB: %.1f KiB per joined socket\n", o.hold, mib(h.rss),
					float64(h.rss-before.rss)/1024/float64(max(1, o.sockets-joinErrs)))
			}
		}
		cancel()
		wg.Wait()
		return nil
	}

	st.reset()
	startCPU := readProcs(o.pids)
	start := time.Now()
	postErrs := postLoop(ctx, o, st)
	// Let in-flight turns land before the final read.
	if o.rate >= 0 || o.expect == 0 {
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
		}
	}
	elapsed := time.Since(start)
	endCPU := readProcs(o.pids)
	cancel()
	wg.Wait()
	st.report(elapsed, postErrs)
	if o.expect > 0 {
		st.reportLast(o.expect)
	}
	if len(o.pids) > 0 {
		cpu := endCPU.cpu - startCPU.cpu
		n := st.received.Load()
		fmt.Printf("gateway CPU: %.2f s over %v: %.2f µs per delivered message\n", cpu.Seconds(), elapsed.Round(time.Millisecond),
			float64(cpu.Microseconds())/float64(max(1, n)))
	}
	return nil
}

func sessionName(o options, i int) string { return fmt.Sprintf("%s-%d", o.prefix, i) }

// postLoop posts events at the configured rate until the duration ends and
// returns the number of requests that failed for good.
func postLoop(ctx context.Context, o options, st *stats) int64 {
	if o.rate < 0 { // measure only
		if o.expect > 0 {
			waitDeliveries(ctx, st, o.expect, o.duration)
			return 0
		}
		select {
		case <-time.After(o.duration):
		case <-ctx.Done():
		}
		return 0
	}
	var failed atomic.Int64
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / o.rate)
	deadline := time.Now().Add(o.duration)
	text := strings.TrimSpace(strings.Repeat("word ", o.words))
	client := &http.Client{Timeout: 30 * time.Second}
	for s := 0; s < o.sessions; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			// Spread the sessions' posts over the interval instead of
			// posting for every session at the same instant.
			select {
			case <-time.After(interval * time.Duration(s) / time.Duration(o.sessions)):
			case <-ctx.Done():
				return
			}
			t := time.NewTicker(interval)
			defer t.Stop()
			for n := 0; time.Now().Before(deadline); n++ {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				base := o.post[(s+n)%len(o.post)]
				body, _ := json.Marshal(map[string]any{"type": "message", "data": map[string]string{"text": text},
					"idempotency_key": fmt.Sprintf("%s-%d-%d", o.prefix, s, n)})
				if err := postWithRetry(ctx, client, base+"/api/sessions/"+sessionName(o, s)+"/events", o.token, body, o.retryOnDirective); err != nil {
					if failed.Add(1) <= 5 {
						fmt.Fprintln(os.Stderr, "post:", err)
					}
				} else {
					st.posted.Add(1)
				}
			}
		}(s)
	}
	wg.Wait()
	return failed.Load()
}

// postWithRetry posts body and follows retry directives (re-send after
// after_ms until budget_ms is spent). A failure without a directive is
// returned as is: the tool never invents a retry.
func postWithRetry(ctx context.Context, c *http.Client, url, token string, body []byte, follow bool) error {
	var budgetEnd time.Time
	for {
		req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		var eb struct {
			Error string `json:"error"`
			Retry *struct {
				AfterMS  int64 `json:"after_ms"`
				BudgetMS int64 `json:"budget_ms"`
			} `json:"retry"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&eb)
		resp.Body.Close()
		if resp.StatusCode == http.StatusAccepted {
			return nil
		}
		if !follow || eb.Retry == nil {
			return fmt.Errorf("%s: %d %s", url, resp.StatusCode, eb.Error)
		}
		if budgetEnd.IsZero() {
			budgetEnd = time.Now().Add(time.Duration(eb.Retry.BudgetMS) * time.Millisecond)
		}
		wait := time.Duration(eb.Retry.AfterMS) * time.Millisecond
		if time.Now().Add(wait).After(budgetEnd) {
			return fmt.Errorf("%s: retry budget spent (%s)", url, eb.Error)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
