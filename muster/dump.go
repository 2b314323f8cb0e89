package muster

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Dump is a point-in-time snapshot of a scope, JSON-marshalable; String
// renders it as text.
type Dump struct {
	Scope       string               `json:"scope"`
	Node        string               `json:"node"`
	Incarnation uint64               `json:"incarnation"`
	Status      Status               `json:"status"`
	ViewHash    uint64               `json:"view_hash"`
	Members     []NodeID             `json:"members"`
	Peers       map[string]uint64    `json:"peers"`
	PeerViews   map[string]viewEntry `json:"peer_views"`
	Owed        []string             `json:"owed_snapshots"`
	Pending     []string             `json:"pending_round,omitempty"`
	// GroupStates maps a claim state to its groups (sorted).
	GroupStates map[string][]string `json:"group_states"`
	// Occupancy maps each group to the sources with a present row (this
	// node's router-role table, not gated by the barrier).
	Occupancy  map[string][]string `json:"occupancy"`
	Tombstones int                 `json:"tombstones"`
	Partial    bool                `json:"partial,omitempty"` // the coordinator did not answer in time
}

type coordDump struct {
	peers   map[string]uint64
	views   map[string]viewEntry
	owed    []string
	pending []string
}

func (c *coordinator) dump() coordDump {
	d := coordDump{peers: map[string]uint64{}, views: map[string]viewEntry{}}
	for k, v := range c.peers {
		d.peers[k] = v
	}
	for k, v := range c.views {
		d.views[k] = v
	}
	for k := range c.owed {
		d.owed = append(d.owed, k)
	}
	slices.Sort(d.owed)
	if c.pending != nil {
		d.pending = names(c.pending.target)
	}
	return d
}

// Dump returns a snapshot of the scope's state. The coordinator's part is
// asked for with a one-second bound; if it is busy, Dump is marked Partial.
func (s *Scope) Dump() Dump {
	d := Dump{
		Scope: s.name, Node: s.self, Incarnation: s.inc.Load(), Status: s.Status(), ViewHash: s.ViewHash(),
		Members: s.view.Load().members, GroupStates: map[string][]string{}, Occupancy: map[string][]string{},
	}
	req := &dumpReq{reply: make(chan coordDump, 1)}
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case s.coord.mbox.ch <- req:
		select {
		case cd := <-req.reply:
			d.Peers, d.PeerViews, d.Owed, d.Pending = cd.peers, cd.views, cd.owed, cd.pending
		case <-t.C:
			d.Partial = true
		case <-s.closing:
			d.Partial = true
		}
	case <-t.C:
		d.Partial = true
	case <-s.closing:
		d.Partial = true
	}
	for _, sh := range s.shards {
		sh.tab.mu.RLock()
		for g, st := range sh.tab.states {
			k := st.st.String()
			d.GroupStates[k] = append(d.GroupStates[k], g)
		}
		sh.tab.mu.RUnlock()
	}
	for _, gs := range d.GroupStates {
		slices.Sort(gs)
	}
	for _, e := range s.occ.snapshot() {
		if e.Tomb {
			d.Tombstones++
			continue
		}
		d.Occupancy[e.Group] = append(d.Occupancy[e.Group], e.Source)
	}
	for _, ss := range d.Occupancy {
		slices.Sort(ss)
	}
	return d
}

// String renders the dump as text, in the spirit of Forum's dump/1.
func (d Dump) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Muster %s @ %s (incarnation %d)\n", d.Scope, d.Node, d.Incarnation)
	fmt.Fprintf(&b, "  status: %s\n  view_hash: %s\n", d.Status, FormatViewHash(d.ViewHash))
	ms := make([]string, len(d.Members))
	for i, m := range d.Members {
		ms[i] = m.String()
	}
	fmt.Fprintf(&b, "  members: [%s]\n", strings.Join(ms, ", "))
	b.WriteString("  peers:\n")
	if len(d.Peers) == 0 {
		b.WriteString("    (none)\n")
	}
	for _, p := range sortedKeys(d.Peers) {
		v, ok := d.PeerViews[p]
		view := "(no announcement)"
		if ok {
			view = fmt.Sprintf("view %016x at %s", v.Hash, v.Seq)
			if v.Transition {
				view = fmt.Sprintf("in transition at %s", v.Seq)
			}
		}
		fmt.Fprintf(&b, "    %s@%d: %s\n", p, d.Peers[p], view)
	}
	fmt.Fprintf(&b, "  owed snapshots: %v\n", d.Owed)
	if d.Pending != nil {
		fmt.Fprintf(&b, "  pending round toward: %v\n", d.Pending)
	}
	b.WriteString("  group_states:\n")
	if len(d.GroupStates) == 0 {
		b.WriteString("    (empty)\n")
	}
	for _, k := range sortedKeys(d.GroupStates) {
		fmt.Fprintf(&b, "    %s (%d): %q\n", k, len(d.GroupStates[k]), d.GroupStates[k])
	}
	b.WriteString("  occupancy (as router):\n")
	if len(d.Occupancy) == 0 {
		b.WriteString("    (empty)\n")
	}
	for _, g := range sortedKeys(d.Occupancy) {
		fmt.Fprintf(&b, "    %q => %v\n", g, d.Occupancy[g])
	}
	fmt.Fprintf(&b, "  tombstones: %d\n", d.Tombstones)
	if d.Partial {
		b.WriteString("  (partial: coordinator busy)\n")
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Summary is a cheap overview of a scope (no coordinator round trip).
type Summary struct {
	Status      Status         `json:"status"`
	ViewHash    uint64         `json:"view_hash"`
	Members     int            `json:"members"`
	PresentRows int            `json:"present_rows"`
	Tombstones  int            `json:"tombstones"`
	GroupStates map[string]int `json:"group_states"` // claim state → groups
	Groups      int            `json:"groups"`       // groups with a claim state
}

// Summary returns counts of the scope's state.
func (s *Scope) Summary() Summary {
	sum := Summary{Status: s.Status(), ViewHash: s.ViewHash(), Members: len(s.view.Load().members), GroupStates: map[string]int{}}
	for _, sh := range s.shards {
		sh.tab.mu.RLock()
		for _, st := range sh.tab.states {
			sum.GroupStates[st.st.String()]++
			sum.Groups++
		}
		sh.tab.mu.RUnlock()
	}
	s.occ.mu.RLock()
	for _, m := range s.occ.rows {
		for _, r := range m {
			if r.Tomb {
				sum.Tombstones++
			} else {
				sum.PresentRows++
			}
		}
	}
	s.occ.mu.RUnlock()
	return sum
}
