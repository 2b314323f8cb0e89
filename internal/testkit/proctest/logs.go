package proctest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
)

// Logs collects a node's output (stdout and stderr, every incarnation) line
// by line. Gateway log lines are JSON objects (zap's production encoder:
// "level", "ts", "msg" and the fields); other lines are kept verbatim.
// Safe for concurrent use.
type Logs struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed and replaced on every new line
}

func newLogs() *Logs { return &Logs{changed: make(chan struct{})} }

// Add appends one line (without its newline).
func (l *Logs) Add(line string) {
	l.mu.Lock()
	l.lines = append(l.lines, line)
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// Lines returns a copy of every line so far.
func (l *Logs) Lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// Len returns the number of lines so far; pass it to WaitFor as from to
// wait only for lines that come after this moment.
func (l *Logs) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// Entry is one JSON log line, decoded.
type Entry map[string]any

// Msg returns the entry's "msg".
func (e Entry) Msg() string { s, _ := e["msg"].(string); return s }

// Str returns field k as a string ("" when absent or not a string).
func (e Entry) Str(k string) string { s, _ := e[k].(string); return s }

// ParseEntry decodes a JSON log line; ok is false for any other line.
func ParseEntry(line string) (Entry, bool) {
	if !strings.HasPrefix(line, "{") {
		return nil, false
	}
	var e Entry
	if err := json.Unmarshal([]byte(line), &e); err != nil {
		return nil, false
	}
	return e, true
}

// Match is a log line predicate.
type Match func(line string) bool

// Msg matches JSON lines whose "msg" is msg and whose string fields equal
// the given key, value pairs.
func Msg(msg string, kv ...string) Match {
	return func(line string) bool {
		e, ok := ParseEntry(line)
		if !ok || e.Msg() != msg {
			return false
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if e.Str(kv[i]) != kv[i+1] {
				return false
			}
		}
		return true
	}
}

// Contains matches lines holding s.
func Contains(s string) Match { return func(line string) bool { return strings.Contains(line, s) } }

// Count returns how many lines from index from on match m.
func (l *Logs) Count(from int, m Match) int {
	n := 0
	for _, line := range l.Lines()[min(from, l.Len()):] {
		if m(line) {
			n++
		}
	}
	return n
}

// WaitFor returns the first line at index from or later that matches m,
// waiting for it until ctx ends.
func (l *Logs) WaitFor(ctx context.Context, from int, m Match) (string, error) {
	return l.WaitForN(ctx, from, m, 1)
}

// WaitForN returns the n-th line (n ≥ 1) at index from or later that
// matches m, waiting for it until ctx ends.
func (l *Logs) WaitForN(ctx context.Context, from int, m Match, n int) (string, error) {
	seen := 0
	for {
		l.mu.Lock()
		for i := from; i < len(l.lines); i++ {
			if m(l.lines[i]) {
				if seen++; seen == n {
					line := l.lines[i]
					l.mu.Unlock()
					return line, nil
				}
			}
		}
		from = max(from, len(l.lines))
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return "", fmt.Errorf("proctest: waiting for log line %d of a kind (%d seen): %w", n, seen, ctx.Err())
		}
	}
}

// Races returns the race detector reports in the log (empty unless the
// binary was built with -race and found a race).
func (l *Logs) Races() []string {
	var out []string
	for _, line := range l.Lines() {
		if strings.Contains(line, "WARNING: DATA RACE") {
			out = append(out, line)
		}
	}
	return out
}

// lineWriter splits written bytes into lines for Logs.
type lineWriter struct {
	logs *Logs
	mu   sync.Mutex
	buf  []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.logs.Add(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}

// flush adds a last unterminated line.
func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.logs.Add(string(w.buf))
		w.buf = nil
	}
}
