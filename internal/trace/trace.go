// Package trace provides named trace points for testing concurrent code with
// forced orderings, in the spirit of Erlang's snabbkaffe.
//
// Production code holds a *Tracer that is nil unless a test injected one, and
// calls t.Emit(kind, kv...) at interesting points. With a nil *Tracer a trace
// point costs a nil check and no allocation: Emit is inlined, and because the
// Tracer records copies of the values (see Emit), the compiler keeps the
// variadic slice and the boxed values on the caller's stack.
// TestEmitOffAllocatesNothing and BenchmarkTraceOff hold this.
//
// Tests create a Tracer with New, hand it to the code under test, and then:
//   - read the collected trace (Events, Count),
//   - block until an event has happened (WaitFor),
//   - park the goroutine that reaches one trace point until another event has
//     happened (Park), to force an interleaving without sleeps.
package trace

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"
)

// Event is one emitted trace point. Fields holds the key/value pairs given to
// Emit, in order; Seq is the event's position in the trace, starting at 1.
type Event struct {
	Seq    uint64
	Kind   string
	Fields []any
	At     time.Time
}

// Get returns the value of field key, or nil if the event has no such field.
func (e Event) Get(key string) any {
	for i := 0; i+1 < len(e.Fields); i += 2 {
		if k, ok := e.Fields[i].(string); ok && k == key {
			return e.Fields[i+1]
		}
	}
	return nil
}

// String renders the event as "kind k=v k=v".
func (e Event) String() string {
	var b strings.Builder
	b.WriteString(e.Kind)
	for i := 0; i+1 < len(e.Fields); i += 2 {
		fmt.Fprintf(&b, " %v=%v", e.Fields[i], e.Fields[i+1])
	}
	return b.String()
}

// Matcher selects events.
type Matcher func(Event) bool

// Kind matches events of the given kind whose fields include every given
// key/value pair (compared with reflect.DeepEqual, so slices and maps match
// by content).
func Kind(kind string, kv ...any) Matcher {
	return func(e Event) bool {
		if e.Kind != kind {
			return false
		}
		for i := 0; i+1 < len(kv); i += 2 {
			k, _ := kv[i].(string)
			if !reflect.DeepEqual(e.Get(k), kv[i+1]) {
				return false
			}
		}
		return true
	}
}

// DefaultParkLimit bounds how long a parked goroutine waits before it is
// released anyway (and the park is reported by Failures). It keeps a broken
// forced ordering from hanging a test run.
const DefaultParkLimit = 10 * time.Second

// Tracer collects trace events. The zero value is not usable; call New.
// A nil *Tracer is valid and discards everything. All methods are safe for
// concurrent use.
type Tracer struct {
	mu       sync.Mutex
	events   []Event
	changed  chan struct{} // closed and replaced on every emit
	parks    []*park
	failures []string
	limit    time.Duration
}

type park struct {
	at, until Matcher
	armedAt   uint64 // the until-event must come after this seq
	used      bool
	released  chan struct{}
}

// New returns an empty Tracer.
func New() *Tracer {
	return &Tracer{changed: make(chan struct{}), limit: DefaultParkLimit}
}

// Enabled reports whether t records anything. Use it to skip computing a
// field that costs something by itself (a call that allocates):
// if t.Enabled() { t.Emit(...) }.
func (t *Tracer) Enabled() bool { return t != nil }

// Emit records a trace point. kv are alternating keys (strings) and values.
// If a Park matches this event, the calling goroutine blocks until the park's
// until-event has been emitted (by another goroutine) or the park limit passes.
//
// Values are recorded as copies (see Own), so a value may be any bool,
// integer, float or string type, or a slice, array, struct (exported fields)
// or pointer built from those; anything else (maps, channels, functions,
// interfaces inside structs, unexported fields) panics when t is not nil.
// Pass err.Error() rather than err.
//
// Emit is small enough to inline: with a nil t it is a nil check, and the
// caller's kv slice and boxed values stay on its stack (nothing of kv but
// the values' contents outlives the call), so a disabled trace point
// allocates nothing.
func (t *Tracer) Emit(kind string, kv ...any) {
	if t == nil {
		return
	}
	t.emit(kind, kv)
}

// emit is Emit's body for a non-nil t. It stays out of line so that Emit
// itself is within the inlining budget.
//
//go:noinline
func (t *Tracer) emit(kind string, kv []any) { t.record(kind, Own(kv)) }

// record appends an event whose fields are already owned by the trace.
func (t *Tracer) record(kind string, fields []any) {
	t.mu.Lock()
	e := Event{Seq: uint64(len(t.events)) + 1, Kind: kind, Fields: fields, At: time.Now()}
	t.events = append(t.events, e)
	close(t.changed)
	t.changed = make(chan struct{})
	var wait *park
	for _, p := range t.parks {
		if p.used {
			// An armed park is released by a later matching event.
			if p.until(e) && e.Seq > p.armedAt {
				select {
				case <-p.released:
				default:
					close(p.released)
				}
			}
			continue
		}
		if wait == nil && p.at(e) {
			p.used = true
			p.armedAt = e.Seq
			wait = p
		}
	}
	limit := t.limit
	t.mu.Unlock()
	if wait == nil {
		return
	}
	select {
	case <-wait.released:
	case <-time.After(limit):
		t.mu.Lock()
		t.failures = append(t.failures, fmt.Sprintf("park at %s released by limit %v: until-event never came", e, limit))
		t.mu.Unlock()
	}
}

// Park makes the first goroutine that emits an event matching at block inside
// Emit until an event matching until is emitted after it. Only one goroutine is
// parked per call. Parks never block forever: see DefaultParkLimit and Failures.
func (t *Tracer) Park(at, until Matcher) {
	t.mu.Lock()
	t.parks = append(t.parks, &park{at: at, until: until, released: make(chan struct{})})
	t.mu.Unlock()
}

// SetParkLimit changes how long a parked goroutine waits at most.
func (t *Tracer) SetParkLimit(d time.Duration) {
	t.mu.Lock()
	t.limit = d
	t.mu.Unlock()
}

// ReleaseAll releases every parked goroutine and disarms pending parks.
func (t *Tracer) ReleaseAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.parks {
		p.used = true
		select {
		case <-p.released:
		default:
			close(p.released)
		}
	}
}

// Failures lists parks that timed out instead of being released by their
// until-event. A test that uses Park should assert it is empty.
func (t *Tracer) Failures() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.failures...)
}

// Events returns a copy of the trace so far.
func (t *Tracer) Events() []Event {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Event(nil), t.events...)
}

// Filter returns the events matching m, in trace order.
func (t *Tracer) Filter(m Matcher) []Event {
	var out []Event
	for _, e := range t.Events() {
		if m(e) {
			out = append(out, e)
		}
	}
	return out
}

// Count returns how many events match m.
func (t *Tracer) Count(m Matcher) int { return len(t.Filter(m)) }

// WaitFor blocks until an event matching m has been emitted (at any time,
// including before the call) and returns the first such event. It returns
// ctx's error if ctx ends first.
func (t *Tracer) WaitFor(ctx context.Context, m Matcher) (Event, error) {
	return t.WaitForN(ctx, m, 1)
}

// WaitForN blocks until n events matching m have been emitted and returns the
// n-th.
func (t *Tracer) WaitForN(ctx context.Context, m Matcher, n int) (Event, error) {
	seen := 0
	next := 0
	for {
		t.mu.Lock()
		for ; next < len(t.events); next++ {
			if m(t.events[next]) {
				seen++
				if seen == n {
					e := t.events[next]
					t.mu.Unlock()
					return e, nil
				}
			}
		}
		ch := t.changed
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Event{}, fmt.Errorf("trace: waiting for event %d: %w", n, ctx.Err())
		}
	}
}

// WaitAfter blocks until an event matching m is emitted with a Seq greater
// than after (use the Seq of an event already seen, or 0).
func (t *Tracer) WaitAfter(ctx context.Context, after uint64, m Matcher) (Event, error) {
	return t.WaitFor(ctx, func(e Event) bool { return e.Seq > after && m(e) })
}

// Dump renders the whole trace, one event a line, for test failure messages.
func (t *Tracer) Dump() string {
	var b strings.Builder
	for _, e := range t.Events() {
		fmt.Fprintf(&b, "%4d %s\n", e.Seq, e)
	}
	return b.String()
}

// Err is the form of an error a trace point records: its message, or "" for
// nil. Errors are interfaces over values a trace point cannot copy (see Own),
// so call sites pass Err(err), never err itself.
func Err(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
