package presence_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/relaygw/relay/presence"
)

type diffRec struct {
	topic string
	diff  json.RawMessage
}

func newTracker() (*presence.Tracker, *[]diffRec) {
	var diffs []diffRec
	tr := presence.NewTracker(presence.TrackerConfig{OnDiff: func(topic string, d json.RawMessage) {
		diffs = append(diffs, diffRec{topic, d})
	}})
	return tr, &diffs
}

func TestTrackerPayloadShapes(t *testing.T) {
	tr, diffs := newTracker()
	if got := string(tr.List("room:1")); got != "{}" {
		t.Fatalf("empty List = %s", got)
	}
	ref := tr.Track("room:1", "u1", map[string]any{"status": "online", "phx_ref": "forged"})
	if ref == "" || ref == "forged" {
		t.Fatalf("ref %q", ref)
	}
	wantJSON(t, tr.List("room:1"), fmt.Sprintf(`{"u1":{"metas":[{"status":"online","phx_ref":%q}]}}`, ref))
	wantJSON(t, (*diffs)[0].diff, fmt.Sprintf(`{"joins":{"u1":{"metas":[{"status":"online","phx_ref":%q}]}},"leaves":{}}`, ref))
	// Listing again keeps the ref.
	wantJSON(t, tr.List("room:1"), fmt.Sprintf(`{"u1":{"metas":[{"status":"online","phx_ref":%q}]}}`, ref))

	ref2, ok := tr.Update("room:1", ref, map[string]any{"status": "away"})
	if !ok || ref2 == ref {
		t.Fatalf("Update = %q, %v", ref2, ok)
	}
	wantJSON(t, (*diffs)[1].diff, fmt.Sprintf(
		`{"joins":{"u1":{"metas":[{"status":"away","phx_ref":%q,"phx_ref_prev":%q}]}},"leaves":{"u1":{"metas":[{"status":"online","phx_ref":%q}]}}}`,
		ref2, ref, ref))
	if _, ok := tr.Update("room:1", ref, nil); ok {
		t.Fatal("Update of a replaced ref succeeded")
	}
	if !tr.Untrack("room:1", ref2) || tr.Untrack("room:1", ref2) {
		t.Fatal("Untrack should succeed once")
	}
	wantJSON(t, (*diffs)[2].diff, fmt.Sprintf(
		`{"joins":{},"leaves":{"u1":{"metas":[{"status":"away","phx_ref":%q,"phx_ref_prev":%q}]}}}`, ref2, ref))
	if tr.Size("room:1") != 0 || string(tr.List("room:1")) != "{}" {
		t.Fatal("topic not empty after untrack")
	}
	if len(*diffs) != 3 {
		t.Fatalf("%d diffs, want 3", len(*diffs))
	}
}

func TestTrackerUntrackAll(t *testing.T) {
	tr, diffs := newTracker()
	r1 := tr.Track("t", "a", nil)
	r2 := tr.Track("t", "a", map[string]any{"n": 2})
	r3 := tr.Track("t", "b", nil)
	tr.Track("other", "a", nil)
	if n := tr.UntrackAll("t"); n != 3 {
		t.Fatalf("UntrackAll = %d", n)
	}
	last := (*diffs)[len(*diffs)-1]
	wantJSON(t, last.diff, fmt.Sprintf(
		`{"joins":{},"leaves":{"a":{"metas":[{"phx_ref":%q},{"n":2,"phx_ref":%q}]},"b":{"metas":[{"phx_ref":%q}]}}}`, r1, r2, r3))
	if tr.Size("other") != 1 {
		t.Fatal("UntrackAll touched another topic")
	}
}

func TestTrackerPanicsOnBadMetaWithoutChange(t *testing.T) {
	tr, diffs := newTracker()
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a func meta")
		}
		if tr.Size("t") != 0 || len(*diffs) != 0 {
			t.Fatal("state changed before the panic")
		}
	}()
	tr.Track("t", "k", map[string]any{"f": func() {}})
}

func wantJSON(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("bad JSON %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Fatalf("got  %s\nwant %s", gb, wb)
	}
}

// client is phoenix.js Presence.syncState/syncDiff (docs/PHOENIX.md §5.2):
// key → metas.
type client map[string][]map[string]any

type wirePresences map[string]struct {
	Metas []map[string]any `json:"metas"`
}

func refs(ms []map[string]any) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m["phx_ref"].(string))
	}
	return out
}

func (c client) syncDiff(t *rapid.T, raw json.RawMessage) {
	var d struct {
		Joins  *wirePresences `json:"joins"`
		Leaves *wirePresences `json:"leaves"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("diff %s: %v", raw, err)
	}
	if d.Joins == nil || d.Leaves == nil {
		t.Fatalf("diff %s lacks joins or leaves", raw)
	}
	for key, p := range *d.Joins {
		joined := refs(p.Metas)
		cur := p.Metas
		var kept []map[string]any
		for _, m := range c[key] {
			if !slices.Contains(joined, m["phx_ref"].(string)) {
				kept = append(kept, m)
			}
		}
		c[key] = append(kept, cur...)
	}
	for key, p := range *d.Leaves {
		left := refs(p.Metas)
		var kept []map[string]any
		for _, m := range c[key] {
			if !slices.Contains(left, m["phx_ref"].(string)) {
				kept = append(kept, m)
			}
		}
		if len(kept) == 0 {
			delete(c, key)
		} else {
			c[key] = kept
		}
	}
}

// refSet flattens key → metas into key → sorted refs.
func refSet(m map[string][]map[string]any) map[string]string {
	out := map[string]string{}
	for k, ms := range m {
		r := refs(ms)
		slices.Sort(r)
		out[k] = fmt.Sprint(r)
	}
	return out
}

// TestTrackerDiffsRebuildState: a client that starts from one List and
// applies every later diff the way phoenix.js does always ends with the same
// refs as a fresh List, for any sequence of Track, Update and Untrack.
func TestTrackerDiffsRebuildState(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tr, diffs := newTracker()
		for range rapid.IntRange(0, 3).Draw(rt, "pre") {
			tr.Track("t", rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "prekey"), nil)
		}
		var state wirePresences
		if err := json.Unmarshal(tr.List("t"), &state); err != nil {
			rt.Fatal(err)
		}
		c := client{}
		for k, p := range state {
			c[k] = p.Metas
		}
		seen := len(*diffs)
		var live []string
		for k := range state {
			live = append(live, refs(state[k].Metas)...)
		}
		slices.Sort(live)
		for i := range rapid.IntRange(1, 30).Draw(rt, "ops") {
			switch op := rapid.IntRange(0, 2).Draw(rt, "op"); {
			case op == 0 || len(live) == 0:
				key := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "key")
				live = append(live, tr.Track("t", key, map[string]any{"i": i}))
			case op == 1:
				j := rapid.IntRange(0, len(live)-1).Draw(rt, "upd")
				nr, ok := tr.Update("t", live[j], map[string]any{"i": i, "upd": true})
				if !ok {
					rt.Fatalf("update of live ref %s failed", live[j])
				}
				live[j] = nr
			default:
				j := rapid.IntRange(0, len(live)-1).Draw(rt, "del")
				if !tr.Untrack("t", live[j]) {
					rt.Fatalf("untrack of live ref %s failed", live[j])
				}
				live = slices.Delete(live, j, j+1)
			}
			for _, d := range (*diffs)[seen:] {
				c.syncDiff(rt, d.diff)
			}
			seen = len(*diffs)
			var now wirePresences
			if err := json.Unmarshal(tr.List("t"), &now); err != nil {
				rt.Fatal(err)
			}
			want := map[string][]map[string]any{}
			for k, p := range now {
				want[k] = p.Metas
			}
			if got, w := refSet(c), refSet(want); !maps.Equal(got, w) {
				rt.Fatalf("client %v, server %v", got, w)
			}
		}
	})
}
