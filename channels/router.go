package channels

import (
	"sort"
	"strings"
	"sync"
)

// router maps topics to handler makers: each join gets the handler its
// maker returns. A pattern ending in "*" matches every topic with that
// prefix ("session:*" matches "session:42"); any other pattern matches
// exactly. Exact patterns win, then the longest prefix.
type router struct {
	mu       sync.RWMutex
	exact    map[string]func() Handler
	prefixes []prefixRoute // longest first
}

type prefixRoute struct {
	prefix string
	h      func() Handler
}

func (r *router) add(pattern string, h func() Handler) {
	if h == nil {
		panic("channels: Handle with a nil handler")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		for i := range r.prefixes {
			if r.prefixes[i].prefix == p {
				r.prefixes[i].h = h
				return
			}
		}
		r.prefixes = append(r.prefixes, prefixRoute{prefix: p, h: h})
		sort.SliceStable(r.prefixes, func(i, j int) bool {
			return len(r.prefixes[i].prefix) > len(r.prefixes[j].prefix)
		})
		return
	}
	if r.exact == nil {
		r.exact = make(map[string]func() Handler)
	}
	r.exact[pattern] = h
}

func (r *router) match(topic string) func() Handler {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if h, ok := r.exact[topic]; ok {
		return h
	}
	for _, p := range r.prefixes {
		if strings.HasPrefix(topic, p.prefix) {
			return p.h
		}
	}
	return nil
}
