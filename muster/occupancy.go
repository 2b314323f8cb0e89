package muster

import (
	"slices"
	"sync"
	"time"
)

// occRow is one occupancy row {group, source} → seq, present|tombstone.
// The writer's incarnation is Seq.Inc: every write for a source carries that
// source's own seq, so the row is attributed to the incarnation that wrote it.
type occRow struct {
	Seq    Seq
	Tomb   bool
	TombAt time.Time // when the tombstone was written (for reaping)
}

// occTable is the router-role occupancy table, owned by the Scope so that a
// coordinator or shard restart does not lose it. It also keeps, per source
// node, the newest incarnation seen and the departure floor (the newest
// incarnation declared departed): writes from an incarnation at or below
// the floor, or older than the newest seen, are refused under the same lock
// the departure cleanup takes, so a late write from a departed incarnation
// can never plant a row after its cleanup.
//
// Every writer goes through upsert (seq-guarded). All methods are safe for
// concurrent use.
type occTable struct {
	mu       sync.RWMutex
	rows     map[string]map[string]*occRow // group → source → row
	bySource map[string]map[string]struct{}
	known    map[string]uint64 // source → newest incarnation seen
	floor    map[string]uint64 // source → newest departed incarnation
}

func newOccTable() *occTable {
	return &occTable{
		rows:     make(map[string]map[string]*occRow),
		bySource: make(map[string]map[string]struct{}),
		known:    make(map[string]uint64),
		floor:    make(map[string]uint64),
	}
}

// admission is the result of checking a source incarnation.
type admission int

const (
	admitOK       admission = iota
	admitNewer              // ok, and newer than any incarnation seen before
	admitStale              // older than the newest seen: drop silently
	admitDeparted           // declared departed: refuse with ErrNotPeer
)

// admitLocked checks (and records) source incarnation inc.
func (t *occTable) admitLocked(source string, inc uint64) admission {
	if inc <= t.floor[source] && t.floor[source] != 0 {
		return admitDeparted
	}
	k := t.known[source]
	switch {
	case inc < k:
		return admitStale
	case inc > k:
		t.known[source] = inc
		if k == 0 {
			return admitOK
		}
		return admitNewer
	}
	return admitOK
}

// admit checks a source incarnation without writing anything.
func (t *occTable) admit(source string, inc uint64) admission {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.admitLocked(source, inc)
}

// departed records that source's incarnations up to inc are gone and
// deletes their rows (present and tombstones; later writes from them are
// refused by the floor). It returns the number of rows removed.
func (t *occTable) departed(source string, inc uint64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if inc > t.floor[source] {
		t.floor[source] = inc
	}
	n := 0
	for g := range t.bySource[source] {
		r := t.rows[g][source]
		if r != nil && r.Seq.Inc <= inc {
			t.deleteLocked(g, source)
			n++
		}
	}
	return n
}

// upsert writes a present row (tomb=false) or a tombstone (tomb=true) at seq,
// unless a newer row exists: a present write needs a strictly newer seq than
// the row (or an equal-seq present row, a no-op); a tombstone needs a seq at
// least the row's. It reports whether the table changed. The write is
// refused (false, admission) if the source incarnation is not admitted.
func (t *occTable) upsert(group, source string, seq Seq, tomb bool, now time.Time) (bool, admission) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.admitLocked(source, seq.Inc)
	if a == admitStale || a == admitDeparted {
		return false, a
	}
	return t.upsertLocked(group, source, seq, tomb, now), a
}

func (t *occTable) upsertLocked(group, source string, seq Seq, tomb bool, now time.Time) bool {
	g := t.rows[group]
	r := g[source]
	if r != nil {
		if tomb {
			if seq.Less(r.Seq) || (r.Tomb && r.Seq == seq) {
				return false
			}
		} else if !r.Seq.Less(seq) {
			return false
		}
	}
	if g == nil {
		g = make(map[string]*occRow)
		t.rows[group] = g
	}
	if r == nil {
		r = &occRow{}
		g[source] = r
		bs := t.bySource[source]
		if bs == nil {
			bs = make(map[string]struct{})
			t.bySource[source] = bs
		}
		bs[group] = struct{}{}
	}
	r.Seq, r.Tomb = seq, tomb
	if tomb {
		r.TombAt = now
	} else {
		r.TombAt = time.Time{}
	}
	return true
}

// applyRound applies a rebalance round from source: every group upserted
// present at seq; with full, then every present row of source older than seq
// for a group not in the round is tombstoned (a full snapshot replaces the
// source's rows; a delta only adds). Upsert before tombstone keeps a
// concurrent reader on the superset.
func (t *occTable) applyRound(source string, groups []string, seq Seq, full bool, now time.Time) admission {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.admitLocked(source, seq.Inc)
	if a == admitStale || a == admitDeparted {
		return a
	}
	in := make(map[string]struct{}, len(groups))
	for _, g := range groups {
		in[g] = struct{}{}
		t.upsertLocked(g, source, seq, false, now)
	}
	if full {
		for g := range t.bySource[source] {
			if _, ok := in[g]; ok {
				continue
			}
			r := t.rows[g][source]
			if !r.Tomb && r.Seq.Less(seq) {
				t.upsertLocked(g, source, seq, true, now)
			}
		}
	}
	return a
}

// retract tombstones in place (keeping each row's seq, so any newer write
// of the source still wins) every present row of source below seq whose
// group moved reports true. It returns the groups retracted.
func (t *occTable) retract(source string, seq Seq, moved func(group string) bool, now time.Time) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for g := range t.bySource[source] {
		r := t.rows[g][source]
		if r.Tomb || !r.Seq.Less(seq) || !moved(g) {
			continue
		}
		r.Tomb, r.TombAt = true, now
		out = append(out, g)
	}
	return out
}

func (t *occTable) deleteLocked(group, source string) {
	g := t.rows[group]
	delete(g, source)
	if len(g) == 0 {
		delete(t.rows, group)
	}
	bs := t.bySource[source]
	delete(bs, group)
	if len(bs) == 0 {
		delete(t.bySource, source)
	}
}

// deleteExact removes the row only if it still has exactly seq (the sweep's
// guard against a concurrent re-claim that raised the row).
func (t *occTable) deleteExact(group, source string, seq Seq) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.rows[group][source]
	if r == nil || r.Seq != seq || r.Tomb {
		return false
	}
	t.deleteLocked(group, source)
	return true
}

// sources returns the sorted sources with a present row for group.
func (t *occTable) sources(group string) []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	g := t.rows[group]
	if len(g) == 0 {
		return nil
	}
	out := make([]string, 0, len(g))
	for s, r := range g {
		if !r.Tomb {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// row returns a copy of the row for {group, source}.
func (t *occTable) row(group, source string) (occRow, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	r := t.rows[group][source]
	if r == nil {
		return occRow{}, false
	}
	return *r, true
}

// occEntry is one row in a snapshot of the table.
type occEntry struct {
	Group, Source string
	occRow
}

// snapshot returns every row (present and tombstones).
func (t *occTable) snapshot() []occEntry {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]occEntry, 0, len(t.rows))
	for g, m := range t.rows {
		for s, r := range m {
			out = append(out, occEntry{g, s, *r})
		}
	}
	return out
}

// scan returns the present rows for which keep reports true, judged under
// the read lock (keep must not touch the table). Callers that then delete
// use deleteExact, so a row raised after it was judged survives.
func (t *occTable) scan(keep func(group, source string, r *occRow) bool) []occEntry {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out []occEntry
	for g, m := range t.rows {
		for s, r := range m {
			if !r.Tomb && keep(g, s, r) {
				out = append(out, occEntry{g, s, *r})
			}
		}
	}
	return out
}

// reap removes tombstones written before cutoff. It returns how many.
func (t *occTable) reap(cutoff time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for g, m := range t.rows {
		for s, r := range m {
			if r.Tomb && r.TombAt.Before(cutoff) {
				t.deleteLocked(g, s)
				n++
			}
		}
	}
	return n
}
