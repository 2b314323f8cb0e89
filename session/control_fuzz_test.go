package session

import (
	"testing"

	"github.com/relaygw/relay/agent"
)

// FuzzParseTurnID: a turn id parses only when it is the Position.String of
// a position with epoch and seq >= 1, and then round-trips.
func FuzzParseTurnID(f *testing.F) {
	for _, s := range []string{"3-17", "1-1", "0-1", "1-0", "-1-2", "1--2", "01-2", "1-2-3", "", "-", "999999999999999999-1", "9999999999999999999-1", " 1-2", "1-2\n", "+1-2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := ParseTurnID(s)
		if !ok {
			if p != (agent.Position{}) {
				t.Fatalf("ParseTurnID(%q) refused but returned %v", s, p)
			}
			return
		}
		if p.Epoch < 1 || p.Seq < 1 {
			t.Fatalf("ParseTurnID(%q) = %v: epoch and seq must be >= 1", s, p)
		}
		q, ok := ParseTurnID(p.String())
		if !ok || q != p {
			t.Fatalf("ParseTurnID(%q) = %v, which does not round-trip (%v %v)", s, p, q, ok)
		}
	})
}
