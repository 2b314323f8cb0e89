package memnet

import (
	"time"

	"github.com/relaygw/relay/internal/trace"
)

type kind uint8

const (
	kindMsg kind = iota
	kindCall
	kindReply
)

func (k kind) String() string {
	switch k {
	case kindMsg:
		return "msg"
	case kindCall:
		return "call"
	default:
		return "reply"
	}
}

// envelope is one message on its way. reply is set for Calls.
type envelope struct {
	from, to string
	kind     kind
	data     []byte
	reply    chan callResult
}

type callResult struct {
	data []byte
	err  error
}

// linkQueue holds a link's delayed deliveries in send order.
type linkQueue struct {
	items []queued
	timer *time.Timer
}

type queued struct {
	env envelope
	due time.Time
}

// traceEmitter is the part of *trace.Tracer memnet uses.
type traceEmitter = *trace.Tracer

// events collects trace points while Network.mu is held, to be emitted after
// it is released (a parked Emit must never hold the lock).
type events = trace.Pending

// countLocked records env as sent.
func (n *Network) countLocked(evs *events, env envelope) {
	n.sent[link{env.from, env.to}]++
	n.total++
	evs.Add(n.tracer, "memnet.send", "from", env.from, "to", env.to, "kind", env.kind.String(), "size", len(env.data))
}

func (n *Network) dropLocked(evs *events, env envelope, reason string) {
	n.dropped++
	evs.Add(n.tracer, "memnet.drop", "from", env.from, "to", env.to, "kind", env.kind.String(), "reason", reason)
}

// sendLocked counts and routes a Send or Broadcast copy.
func (n *Network) sendLocked(evs *events, env envelope) {
	n.countLocked(evs, env)
	n.routeLocked(evs, env)
}

// routeLocked applies the link's faults to env and schedules its arrival.
func (n *Network) routeLocked(evs *events, env envelope) {
	l := link{env.from, env.to}
	if n.blocked[l] {
		n.dropLocked(evs, env, "blocked")
		return
	}
	if _, ok := n.nodes[env.to]; !ok {
		n.dropLocked(evs, env, "dead")
		return
	}
	f := n.faultsLocked(l)
	if f.zero() {
		n.scheduleLocked(evs, l, env, f)
		return
	}
	if f.Drop > 0 && n.rng.Float64() < f.Drop {
		n.dropLocked(evs, env, "random")
		return
	}
	n.scheduleLocked(evs, l, env, f)
	if env.kind == kindMsg && f.Duplicate > 0 && n.rng.Float64() < f.Duplicate {
		dup := env
		dup.data = append([]byte(nil), env.data...)
		n.scheduleLocked(evs, l, dup, f)
	}
}

func (n *Network) delayLocked(f LinkFaults) time.Duration {
	d := f.Delay
	if f.Jitter > 0 {
		d += time.Duration(n.rng.Int63n(int64(f.Jitter) + 1))
	}
	return d
}

// scheduleLocked delivers env now or later, keeping the link's order unless
// the message is picked for reordering.
func (n *Network) scheduleLocked(evs *events, l link, env envelope, f LinkFaults) {
	if f.Reorder > 0 && n.rng.Float64() < f.Reorder {
		w := f.ReorderWindow
		if w <= 0 {
			w = DefaultReorderWindow
		}
		d := n.delayLocked(f) + time.Duration(n.rng.Int63n(int64(w))+1)
		n.timers++
		n.afterLocked(d, func(evs *events) {
			n.timers--
			n.arriveLocked(evs, env)
		})
		return
	}
	d := n.delayLocked(f)
	q := n.queues[l]
	if d == 0 && (q == nil || len(q.items) == 0) {
		n.arriveLocked(evs, env)
		return
	}
	if q == nil {
		q = &linkQueue{}
		n.queues[l] = q
	}
	now := time.Now()
	due := now.Add(d)
	if k := len(q.items); k > 0 && due.Before(q.items[k-1].due) {
		due = q.items[k-1].due
	}
	q.items = append(q.items, queued{env, due})
	n.timers++
	if q.timer == nil {
		q.timer = n.afterLocked(due.Sub(now), func(evs *events) { n.pumpLocked(evs, l) })
	}
}

// pumpLocked delivers the link's queued messages that are due and re-arms
// the link's timer for the rest.
func (n *Network) pumpLocked(evs *events, l link) {
	q := n.queues[l]
	if q == nil {
		return
	}
	q.timer = nil
	now := time.Now()
	for len(q.items) > 0 && !q.items[0].due.After(now) {
		it := q.items[0]
		q.items[0] = queued{}
		q.items = q.items[1:]
		n.timers--
		n.arriveLocked(evs, it.env)
	}
	if len(q.items) == 0 {
		delete(n.queues, l)
		return
	}
	q.timer = n.afterLocked(q.items[0].due.Sub(now), func(evs *events) { n.pumpLocked(evs, l) })
}

// afterLocked runs f with Network.mu held after d, unless the network is
// closed first. Trace points f collects are emitted after the lock is
// released.
func (n *Network) afterLocked(d time.Duration, f func(evs *events)) *time.Timer {
	var tm *time.Timer
	tm = time.AfterFunc(d, func() {
		var evs events
		n.mu.Lock()
		if _, ok := n.allTimer[tm]; !ok {
			n.mu.Unlock()
			return
		}
		delete(n.allTimer, tm)
		f(&evs)
		n.notifyLocked()
		tr := n.tracer
		n.mu.Unlock()
		evs.Emit(tr)
	})
	n.allTimer[tm] = struct{}{}
	return tm
}

// arriveLocked puts env into its receiver's inbox, or drops it when the
// receiver is dead or not started.
func (n *Network) arriveLocked(evs *events, env envelope) {
	t, ok := n.nodes[env.to]
	switch {
	case !ok:
		n.dropLocked(evs, env, "dead")
	case !t.started:
		n.dropLocked(evs, env, "not-started")
	default:
		t.inbox = append(t.inbox, env)
		t.cond.Signal()
	}
}

// replyLocked sends a Call's result back over the link callee → caller.
func (n *Network) replyLocked(evs *events, call envelope, res callResult) {
	l := link{call.to, call.from}
	env := envelope{from: call.to, to: call.from, kind: kindReply}
	if n.blocked[l] {
		n.dropLocked(evs, env, "blocked")
		return
	}
	f := n.faultsLocked(l)
	if f.Drop > 0 && n.rng.Float64() < f.Drop {
		n.dropLocked(evs, env, "random")
		return
	}
	d := n.delayLocked(f)
	if d == 0 {
		call.reply <- res
		return
	}
	n.timers++
	n.afterLocked(d, func(*events) {
		n.timers--
		call.reply <- res
	})
}
