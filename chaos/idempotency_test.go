package chaos

import (
	"testing"
	"time"

	"github.com/relaygw/relay/internal/testkit/proctest"
)

// TestIdempotencyKeysAcrossTakeover: keys live in the checkpoint, so a POST
// re-sent with the same key after its owner died is answered as the
// duplicate it is, with the original position, by the new owner and
// through a forward to it. A key first refused inside the takeover window
// is accepted once and then also answered as a duplicate.
func TestIdempotencyKeysAcrossTakeover(t *testing.T) {
	c := newCluster(t, nil)
	a, b, cc := c.Start("a", nil), c.Start("b", nil), c.Start("c", nil)
	const id = "idem-takeover"
	one := mustAccept(t, c, a, id, proctest.Event{Text: "one", Key: "k-one"})
	waitView(t, c, a, id, "the first turn", turnsDone(1))
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}

	// Inside the window: both refused with a directive, then accepted once.
	toB := func(int) string { return b.URL() }
	re := c.Client().Deliver(timeout(t, 20*time.Second), toB, id, proctest.Event{Text: "one", Key: "k-one"})
	if re.Err != nil || re.Directives == 0 {
		t.Fatalf("re-send across the takeover: %v after %d directives", re.Err, re.Directives)
	}
	if !re.Accepted.Duplicate || re.Accepted.Epoch != one.Epoch || re.Accepted.Seq != one.Seq {
		t.Fatalf("re-sent key accepted as %+v, want the duplicate of %+v", *re.Accepted, one)
	}
	two := c.Client().Deliver(timeout(t, 20*time.Second), toB, id, proctest.Event{Text: "two", Key: "k-two"})
	if two.Err != nil || two.Accepted.Duplicate || two.Accepted.Epoch != one.Epoch+1 {
		t.Fatalf("new key after the takeover: %v %+v", two.Err, two.Accepted)
	}

	// Again, on the new owner and through a forward from c.
	for _, p := range []*proctest.Proc{b, cc} {
		for _, k := range []struct {
			text, key string
			want      proctest.Accepted
		}{{"one", "k-one", one}, {"two", "k-two", *two.Accepted}} {
			got := mustAccept(t, c, p, id, proctest.Event{Text: k.text, Key: k.key})
			if !got.Duplicate || got.Epoch != k.want.Epoch || got.Seq != k.want.Seq {
				t.Errorf("%s re-sent to %s: %+v, want the duplicate of %+v", k.key, p.Name(), got, k.want)
			}
		}
	}
	view := waitView(t, c, cc, id, "both turns", turnsDone(2))
	if got := userCounts(view.History); got["one"] != 1 || got["two"] != 1 || len(view.History) != 4 {
		t.Errorf("history %+v, want each event once", view.History)
	}
	logged := loggedUserEvents(replayLog(t, c, id))
	if len(logged["one"]) != 1 || len(logged["two"]) != 1 {
		t.Errorf("replay log user_events %v, want each once", logged)
	}
}
