package muster

import "sync"

// testHooks are fault-injection seams for this package's tests. A nil
// *testHooks (production) costs one nil check per crash point.
type testHooks struct {
	mu      sync.Mutex
	crashes map[string]int // point → remaining crashes
}

// crashPoint panics the calling goroutine (a shard or the coordinator,
// which then restarts) if a test armed a crash at point.
func (s *Scope) crashPoint(point string) {
	h := s.hooks
	if h == nil {
		return
	}
	h.mu.Lock()
	n := h.crashes[point]
	if n > 0 {
		h.crashes[point] = n - 1
	}
	h.mu.Unlock()
	if n > 0 {
		s.tr.Emit("muster_injected_crash", "scope", s.name, "node", s.self, "point", point)
		panic("muster: injected crash at " + point)
	}
}
