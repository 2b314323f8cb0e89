package muster

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
	"go.uber.org/zap"

	"github.com/relaygw/relay/muster/ring"
)

// NodeID is one incarnation of a node: its transport name and the
// incarnation its Scope runs under.
type NodeID struct {
	Name string `json:"name"`
	Inc  uint64 `json:"inc"`
}

func (n NodeID) String() string { return n.Name + "@" + strconv.FormatUint(n.Inc, 10) }

// FormatViewHash is the one text form of a view hash, in logs and in the
// gateway's admin API and ops page alike: 16 lower-case hex digits,
// zero-padded.
func FormatViewHash(h uint64) string { return fmt.Sprintf("%016x", h) }

// viewHashField is a view hash as a log field (FormatViewHash).
func viewHashField(h uint64) zap.Field { return zap.String("view_hash", FormatViewHash(h)) }

// ViewHash is the frozen, documented hash of a member list: xxhash64 over
// the concatenation, for each member sorted by name, of the bytes
// "<name>\x00<incarnation in decimal>\n". The empty list hashes to
// xxhash64(""). Order and duplicates of the input do not matter.
//
// Exported so that other regions can compute the hash a scope publishes.
func ViewHash(members []NodeID) uint64 {
	ms := sortedMembers(members)
	d := xxhash.New()
	buf := make([]byte, 0, 64)
	for _, m := range ms {
		buf = append(buf[:0], m.Name...)
		buf = append(buf, 0)
		buf = strconv.AppendUint(buf, m.Inc, 10)
		buf = append(buf, '\n')
		_, _ = d.Write(buf)
	}
	return d.Sum64()
}

// RingConfig returns the ring Muster builds for members (names only; the
// incarnation does not move routers) with vnodes virtual nodes each.
func RingConfig(members []NodeID, vnodes int) *ring.Ring {
	return ring.New(names(members), vnodes)
}

func sortedMembers(members []NodeID) []NodeID {
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b NodeID) int {
		if a.Name != b.Name {
			if a.Name < b.Name {
				return -1
			}
			return 1
		}
		switch {
		case a.Inc < b.Inc:
			return -1
		case a.Inc > b.Inc:
			return 1
		}
		return 0
	})
	return slices.Compact(ms)
}

func names(ms []NodeID) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
	}
	return out
}
