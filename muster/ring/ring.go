// Package ring is the consistent-hash ring Muster routes groups with.
//
// A Ring is built from a member list (node names) with a fixed number of
// virtual nodes per member. Every node that builds a Ring from the same set
// of names gets the same answer for every key: the ring depends only on the
// set (order and duplicates are ignored).
//
// Hash function (frozen; changing it changes every router in a mixed-version
// cluster): a virtual node's point is xxhash64 of the bytes
// "<name>#<i>" for i in [0, VirtualNodes), a key's point is xxhash64 of the
// key's bytes, and a key belongs to the member owning the first point at or
// after the key's point, wrapping around. Equal points are ordered by name.
package ring

import (
	"slices"
	"sort"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// DefaultVirtualNodes is the number of points per member (Forum's default).
const DefaultVirtualNodes = 128

// Ring maps keys to members. A Ring is immutable and safe for concurrent use.
type Ring struct {
	members []string // sorted, unique
	points  []point  // sorted by (hash, member)
}

type point struct {
	hash   uint64
	member int32 // index into members
}

// New builds a ring over members with vnodes points each (vnodes <= 0 means
// DefaultVirtualNodes). An empty member list gives a ring whose Find returns "".
func New(members []string, vnodes int) *Ring {
	if vnodes <= 0 {
		vnodes = DefaultVirtualNodes
	}
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	r := &Ring{members: ms, points: make([]point, 0, len(ms)*vnodes)}
	buf := make([]byte, 0, 64)
	for mi, m := range ms {
		for i := 0; i < vnodes; i++ {
			buf = append(buf[:0], m...)
			buf = append(buf, '#')
			buf = strconv.AppendInt(buf, int64(i), 10)
			r.points = append(r.points, point{hash: xxhash.Sum64(buf), member: int32(mi)})
		}
	}
	sort.Slice(r.points, func(i, j int) bool {
		a, b := r.points[i], r.points[j]
		if a.hash != b.hash {
			return a.hash < b.hash
		}
		return ms[a.member] < ms[b.member]
	})
	return r
}

// Members returns the ring's sorted member list. The caller must not modify it.
func (r *Ring) Members() []string { return r.members }

// Find returns the member that owns key, or "" for an empty ring.
func (r *Ring) Find(key string) string {
	if r == nil || len(r.points) == 0 {
		return ""
	}
	h := xxhash.Sum64String(key)
	i := sort.Search(len(r.points), func(i int) bool { return r.points[i].hash >= h })
	if i == len(r.points) {
		i = 0
	}
	return r.members[r.points[i].member]
}

// Has reports whether name is a member of the ring.
func (r *Ring) Has(name string) bool {
	if r == nil {
		return false
	}
	_, ok := slices.BinarySearch(r.members, name)
	return ok
}
