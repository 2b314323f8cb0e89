package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/internal/testkit/phxtest"
	"github.com/relaygw/relay/internal/testkit/proctest"
	"github.com/relaygw/relay/session"
)

// observer watches one session on one node through a raw Phoenix socket and
// follows the client rule of README "Gaps": it keeps the events it holds
// contiguous, and when an event's seq is more than one past the last one it
// holds, or its socket or channel ends, it rejoins with last_event set to
// its last contiguous event. A node that is down or paused is redialled
// until it answers.
type observer struct {
	node    *proctest.Proc
	session string
	token   string

	mu     sync.Mutex
	sock   *phxtest.Socket
	record []phxtest.SessionEvent // what the client holds: contiguous from seq 1 but for holes
	seen   []phxtest.SessionEvent // every session push read, in arrival order
	// streams holds, per successful join, the session pushes of that join
	// (its replay, then its live events, then any that came after the
	// observer left it), in arrival order.
	streams [][]phxtest.SessionEvent
	joins   int // successful joins
	jumps   int // seq jumps that caused a rejoin
	stale   int // pushes at or before the record's last position
	// foreign counts pushes of an earlier join on the same socket
	// (between a phx_leave and the next join's reply).
	foreign int
	// lastJump describes the latest seq jump ("held 1-4, got 1-6").
	lastJump string
	// unrecovered lists the reasons of join replies that said
	// recovered:false.
	unrecovered []string
	// acceptJump is set by a join that answered recovered:false: the
	// replay cannot fill the gap, so (as a client that refetched the
	// history would) the next event is kept even after a jump, and the
	// hole is noted in holes.
	acceptJump bool
	holes      []string
}

// dialTimeout bounds one dial and join: a paused node never answers, and
// the observer must try again after it resumes.
const dialTimeout = 3 * time.Second

// run observes until ctx ends.
func (o *observer) run(ctx context.Context) {
	for ctx.Err() == nil {
		s, joinRef, err := o.connect(ctx)
		if err != nil {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		o.follow(ctx, s, joinRef)
		s.Close()
	}
}

// connect dials the node and joins the session from the record's top.
func (o *observer) connect(ctx context.Context) (*phxtest.Socket, string, error) {
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	s, err := phxtest.DialNode(dctx, o.node.URL(), o.token)
	if err != nil {
		return nil, "", err
	}
	o.mu.Lock()
	o.sock = s
	o.mu.Unlock()
	ref, err := o.join(dctx, s)
	if err != nil {
		s.Close()
		return nil, "", err
	}
	return s, ref, nil
}

// follow reads pushes until the socket fails, rejoining on a seq jump or a
// channel error or close.
func (o *observer) follow(ctx context.Context, s *phxtest.Socket, joinRef string) {
	topic := session.Topic(o.session)
	var rejoinedAt *agent.Position
	for {
		f, err := o.read(ctx, s)
		if err != nil {
			return
		}
		// A broadcast carries no join ref; a push with another join's ref
		// belongs to an earlier join (the phoenix client's isMember rule).
		if f.Topic != topic || f.JoinRef != nil && *f.JoinRef != joinRef {
			if _, ok := f.SessionEvent(); ok {
				o.mu.Lock()
				o.foreign++
				o.mu.Unlock()
			}
			continue
		}
		rejoin := f.Event == "phx_error" || f.Event == "phx_close"
		if ev, ok := f.SessionEvent(); ok {
			o.mu.Lock()
			if n := len(o.streams); n > 0 {
				o.streams[n-1] = append(o.streams[n-1], ev)
			}
			o.mu.Unlock()
			rejoin = o.add(ev)
		}
		if !rejoin {
			continue
		}
		// A hole the replay cannot fill (the log itself jumps) brings the
		// same jump back at once: rejoin at a client's pace, not in a spin.
		if top := o.top(); rejoinedAt != nil && *rejoinedAt == top {
			sleep(ctx, 200*time.Millisecond)
		} else {
			rejoinedAt = &top
		}
		if f.Event != "phx_error" && f.Event != "phx_close" {
			if _, err := s.Send(ctx, joinRef, topic, "phx_leave", map[string]any{}); err != nil {
				return
			}
		}
		jctx, cancel := context.WithTimeout(ctx, dialTimeout)
		joinRef, err = o.join(jctx, s)
		cancel()
		if err != nil {
			return
		}
	}
}

// read reads one frame and keeps every session push in seen.
func (o *observer) read(ctx context.Context, s *phxtest.Socket) (phxtest.Frame, error) {
	f, err := s.Read(ctx)
	if err != nil {
		return f, err
	}
	if ev, ok := f.SessionEvent(); ok {
		o.mu.Lock()
		o.seen = append(o.seen, ev)
		o.mu.Unlock()
	}
	return f, nil
}

// join sends phx_join with last_event at the record's top and reads until
// its reply; it returns the join ref.
func (o *observer) join(ctx context.Context, s *phxtest.Socket) (string, error) {
	topic := session.Topic(o.session)
	top := o.top()
	ref, err := s.Send(ctx, "", topic, "phx_join", map[string]any{"last_event": top})
	if err != nil {
		return "", err
	}
	for {
		f, err := o.read(ctx, s)
		if err != nil {
			return "", err
		}
		if ev, ok := f.SessionEvent(); ok && f.Topic == topic {
			// Before the reply, a session push is the previous join's (one
			// the socket still got after the observer sent phx_leave).
			o.mu.Lock()
			if n := len(o.streams); n > 0 {
				o.streams[n-1] = append(o.streams[n-1], ev)
			}
			o.mu.Unlock()
		}
		if f.Event != "phx_reply" || f.Ref == nil || *f.Ref != ref {
			continue
		}
		var r struct {
			Status   string `json:"status"`
			Response struct {
				Recovered bool   `json:"recovered"`
				Reason    string `json:"reason"`
			} `json:"response"`
		}
		if err := json.Unmarshal(f.Payload, &r); err != nil {
			return "", err
		}
		if r.Status != "ok" {
			return "", fmt.Errorf("chaos: join %s on %s: %s", topic, o.node.Name(), f.Payload)
		}
		o.mu.Lock()
		o.joins++
		o.streams = append(o.streams, nil)
		o.acceptJump = !r.Response.Recovered
		if !r.Response.Recovered {
			o.unrecovered = append(o.unrecovered, fmt.Sprintf("join at %v: %s", top, r.Response.Reason))
		}
		o.mu.Unlock()
		return ref, nil
	}
}

// add takes one push of the current join. It reports a seq jump (the event
// is then not kept: the rejoin's replay brings it), unless the join said
// the replay could not fill it.
func (o *observer) add(ev phxtest.SessionEvent) (jump bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	held := "nothing"
	var last phxtest.SessionEvent
	if len(o.record) > 0 {
		last = o.record[len(o.record)-1]
		held = pos(last).String()
	}
	switch {
	case len(o.record) > 0 && !pos(last).Less(pos(ev)):
		o.stale++
		return false
	case gap(o.record, ev) && o.acceptJump:
		o.holes = append(o.holes, fmt.Sprintf("held %s, got %v %s after %s", held, pos(ev), ev.Type, o.unrecovered[len(o.unrecovered)-1]))
	case gap(o.record, ev):
		o.jumps++
		o.lastJump = fmt.Sprintf("held %s, got %v %s", held, pos(ev), ev.Type)
		return true
	}
	o.acceptJump = false
	o.record = append(o.record, ev)
	return false
}

// gap reports whether ev, following the record, shows a missed event by
// the client rule of README "Gaps": within an epoch, a seq more than one
// past the last held; across epochs, a prev after the last held, or no
// prev at all (the new epoch's first event, which carries it, was missed).
func gap(record []phxtest.SessionEvent, ev phxtest.SessionEvent) bool {
	if len(record) == 0 {
		return ev.Seq > 1
	}
	last := record[len(record)-1]
	switch {
	case ev.Epoch == last.Epoch:
		return ev.Seq > last.Seq+1
	case ev.Prev != nil:
		return pos(last).Less(*ev.Prev)
	default:
		return true
	}
}

// top returns the record's last position ({0,0} when empty).
func (o *observer) top() agent.Position {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.record) == 0 {
		return agent.Position{}
	}
	return pos(o.record[len(o.record)-1])
}

// rejoinAndWait closes the socket, as a client that suspects a missed
// event may do at any time (README "Gaps"), and waits until the observer
// has joined again and holds want, the log's last position. It returns an
// error when that does not happen before ctx ends.
func (o *observer) rejoinAndWait(ctx context.Context, want agent.Position) error {
	o.mu.Lock()
	joins := o.joins
	if o.sock != nil {
		o.sock.Close()
	}
	o.mu.Unlock()
	for {
		o.mu.Lock()
		joined := o.joins > joins
		o.mu.Unlock()
		top := o.top()
		if joined && !top.Less(want) {
			return nil
		}
		select {
		case <-ctx.Done():
			o.mu.Lock()
			defer o.mu.Unlock()
			unrecovered := o.unrecovered
			if len(unrecovered) > 3 {
				unrecovered = unrecovered[len(unrecovered)-3:]
			}
			return fmt.Errorf("observer of %s on %s: rejoined %v, holds up to %v, the log ends at %v; %d pushes read (%d of an earlier join), %d joins, %d jumps (last: %s), %d stale pushes, %d joins not recovered (last: %v)",
				o.session, o.node.Name(), joined, top, want, len(o.seen), o.foreign, o.joins, o.jumps, o.lastJump, o.stale, len(o.unrecovered), unrecovered)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// snapshot returns what the observer ended with.
func (o *observer) snapshot() observed {
	o.mu.Lock()
	defer o.mu.Unlock()
	return observed{
		Node: o.node.Name(), Session: o.session,
		Record: append([]phxtest.SessionEvent(nil), o.record...),
		Seen:   append([]phxtest.SessionEvent(nil), o.seen...),
		Holes:  append([]string(nil), o.holes...),
	}
}

func pos(ev phxtest.SessionEvent) agent.Position {
	return agent.Position{Epoch: ev.Epoch, Seq: ev.Seq}
}
