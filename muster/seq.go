package muster

import (
	"encoding/json"
	"fmt"
)

// Seq orders every write a source makes: occupancy rows, rebalance rounds,
// announce watermarks. It is compared lexicographically: first the writer's
// incarnation, then a counter. Within one process the counter only grows;
// a new process (or a new incarnation inside a live process) has a larger
// incarnation, so a source's seqs are monotonic across restarts as long as
// incarnations grow (see Config.Incarnation and doc.go, "Translation hazard").
type Seq struct {
	Inc uint64 // writer incarnation
	N   uint64 // counter within the process
}

// Less reports whether s orders before o.
func (s Seq) Less(o Seq) bool {
	if s.Inc != o.Inc {
		return s.Inc < o.Inc
	}
	return s.N < o.N
}

// LessEq reports s <= o.
func (s Seq) LessEq(o Seq) bool { return !o.Less(s) }

// IsZero reports whether s is the zero Seq (no write).
func (s Seq) IsZero() bool { return s == Seq{} }

func (s Seq) String() string { return fmt.Sprintf("%d.%d", s.Inc, s.N) }

// MarshalJSON encodes s as [inc, n].
func (s Seq) MarshalJSON() ([]byte, error) { return json.Marshal([2]uint64{s.Inc, s.N}) }

// UnmarshalJSON decodes [inc, n].
func (s *Seq) UnmarshalJSON(b []byte) error {
	var a []uint64
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	if len(a) != 2 {
		return fmt.Errorf("seq: want [inc, n], got %d numbers", len(a))
	}
	s.Inc, s.N = a[0], a[1]
	return nil
}
