package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/relaygw/relay/internal/testkit/proctest"
)

// answerKind classifies one answer to an event POST by what it tells the
// client about the event.
type answerKind int

const (
	// answerAccepted: 202, new or duplicate. The event runs.
	answerAccepted answerKind = iota
	// answerRefused: 503 with a retry directive (session_moving,
	// draining) or 429 session_busy. Nothing was logged and nothing runs.
	answerRefused
	// answerUnknown: no HTTP answer, 504 forward_timeout, 502
	// forward_failed, 409 fenced or 500. The event may have been accepted;
	// re-sending it with the same idempotency key is safe.
	answerUnknown
	// answerInvalid: any other answer (a 4xx for a body the writer built
	// correctly): a bug of the gateway or of the test.
	answerInvalid
)

// answer is one attempt's outcome.
type answer struct {
	Kind   answerKind
	Node   string // node name the attempt went to
	Status int    // 0 when no HTTP answer came
	Code   string // error code of the body
	Retry  *proctest.Retry
}

func (a answer) String() string {
	if a.Status == 0 {
		return a.Node + ": no answer"
	}
	return fmt.Sprintf("%s: %d %s", a.Node, a.Status, a.Code)
}

// delivery is one event a writer sent to a session, and every answer it got
// until it was accepted or the writer gave up.
type delivery struct {
	Session  string
	Key      string // idempotency key, unique in the run
	Text     string // data.text, unique in the run (it starts with Key)
	Answers  []answer
	Accepted *proctest.Accepted // the 202 body; nil when the writer gave up
}

// refusedOnly reports whether every answer before the n-th was a refusal:
// nothing the client was told before then leaves room for the event to
// have run.
func (d *delivery) refusedOnly(n int) bool {
	for _, a := range d.Answers[:n] {
		if a.Kind != answerRefused {
			return false
		}
	}
	return true
}

// writerPolicy bounds how long a writer keeps re-sending one event.
type writerPolicy struct {
	// UnknownLimit is how many answers in a row may leave the outcome open
	// (no answer, 504, 502, 409, 500) before the writer gives up.
	UnknownLimit int
	// UnknownWait is the pause before re-sending after such an answer.
	UnknownWait time.Duration
	// BusyWait is the pause after 429 session_busy, which has no
	// directive; BusyLimit bounds how many in a row are followed.
	BusyWait  time.Duration
	BusyLimit int
}

var defaultWriterPolicy = writerPolicy{UnknownLimit: 60, UnknownWait: 50 * time.Millisecond, BusyWait: 100 * time.Millisecond, BusyLimit: 50}

// writer posts events to random nodes and follows the answers as a careful
// backend does (README "Retry directive"): a 503 directive is followed
// after after_ms while its budget_ms lasts; an answer that leaves the
// outcome open is re-sent with the same idempotency key; it gives up only
// when the directive's budget or the policy's limits run out.
type writer struct {
	client *proctest.Client
	nodes  []*proctest.Proc
	policy writerPolicy
	rng    *rand.Rand // used by this writer's goroutine only
}

// deliver sends one event until it is accepted or given up (ctx ending
// gives up too).
func (w *writer) deliver(ctx context.Context, id, key, text string) *delivery {
	d := &delivery{Session: id, Key: key, Text: text}
	var deadline time.Time // the latest directive's budget
	unknown, busy := 0, 0
	for ctx.Err() == nil {
		p := w.nodes[w.rng.IntN(len(w.nodes))]
		r, err := w.client.PostEvent(ctx, p.URL(), id, proctest.Event{Text: text, Key: key})
		a := classify(p.Name(), r, err)
		d.Answers = append(d.Answers, a)
		var wait time.Duration
		switch a.Kind {
		case answerAccepted:
			d.Accepted = r.Accepted
			return d
		case answerInvalid:
			return d
		case answerUnknown:
			if unknown++; unknown > w.policy.UnknownLimit {
				return d
			}
			wait = w.policy.UnknownWait
		case answerRefused:
			unknown = 0
			if a.Retry == nil {
				if busy++; busy > w.policy.BusyLimit {
					return d
				}
				wait = w.policy.BusyWait
				break
			}
			busy = 0
			now := time.Now()
			deadline = now.Add(time.Duration(a.Retry.BudgetMS) * time.Millisecond)
			wait = time.Duration(a.Retry.AfterMS) * time.Millisecond
			if now.Add(wait).After(deadline) {
				return d
			}
		}
		sleep(ctx, wait)
	}
	return d
}

// classify maps one POST result to its answer.
func classify(node string, r proctest.Reply, err error) answer {
	a := answer{Node: node, Status: r.Status, Code: r.Code, Retry: r.Retry}
	switch {
	case err != nil && r.Status == 0:
		a.Kind = answerUnknown
	case r.Accepted != nil:
		a.Kind = answerAccepted
	case r.Status == http.StatusServiceUnavailable && r.Retry != nil,
		r.Status == http.StatusTooManyRequests:
		a.Kind = answerRefused
	case r.Status == http.StatusGatewayTimeout, r.Status == http.StatusBadGateway,
		r.Status == http.StatusConflict, r.Status == http.StatusInternalServerError:
		a.Kind = answerUnknown
	default:
		a.Kind = answerInvalid
	}
	return a
}

// ledger collects every delivery of a run. Safe for concurrent use.
type ledger struct {
	mu         sync.Mutex
	deliveries []*delivery
}

func (l *ledger) add(d *delivery) {
	l.mu.Lock()
	l.deliveries = append(l.deliveries, d)
	l.mu.Unlock()
}

func (l *ledger) all() []*delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*delivery(nil), l.deliveries...)
}

// eventText is the unique body text of a writer's n-th event: its key and
// three more words, so the echo agent streams a turn of four deltas.
func eventText(key string) string { return key + " one two three" }

// runWriters starts n writers posting to random sessions until stop is
// closed, each pausing up to think between events; every delivery in
// flight when stop closes is followed to its end. The returned function
// waits for them.
func runWriters(ctx context.Context, n int, seed uint64, think time.Duration, w writer, sessions []string, l *ledger, stop <-chan struct{}) (wait func()) {
	var wg sync.WaitGroup
	for i := range n {
		w := w
		w.rng = rand.New(rand.NewPCG(seed, uint64(i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d-%d", i, k)
				l.add(w.deliver(ctx, sessions[w.rng.IntN(len(sessions))], key, eventText(key)))
				sleep(ctx, time.Duration(w.rng.Int64N(int64(think)+1)))
			}
		}()
	}
	return wg.Wait
}
