package session

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"time"

	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/relaygw/relay/agent"
)

// InputHash is the SHA-256 of an input's canonical body: its type, a zero
// byte, and its data with insignificant whitespace removed (json.Compact;
// the raw bytes when data is not valid JSON). The idempotency key is not
// part of it. Two inputs under one key are the same event exactly when
// their hashes are equal (docs/OWNERSHIP.md "Durable inbox and history").
func InputHash(in agent.Input) [32]byte {
	var b bytes.Buffer
	b.Grow(len(in.Type) + 1 + len(in.Data))
	b.WriteString(in.Type)
	b.WriteByte(0)
	n := b.Len()
	if err := json.Compact(&b, in.Data); err != nil {
		b.Truncate(n)
		b.Write(in.Data)
	}
	return sha256.Sum256(b.Bytes())
}

// pendingInput is an accepted input waiting for its turn (an inbox entry).
type pendingInput struct {
	Input    agent.Input
	Epoch    int64
	Seq      int64
	Attempts int // attempts of its turn started so far (InboxEntry.Attempts)
	// trace is the span that accepted the input on this process (invalid
	// for inputs thawed from the inbox): the parent of its turn's span.
	trace oteltrace.SpanContext
}

func (p pendingInput) pos() agent.Position { return agent.Position{Epoch: p.Epoch, Seq: p.Seq} }

// keyEntry remembers one accepted idempotency key: the position of its
// user_event, the hash of its body (zero: unknown, carried over from an
// agent_checkpoints document by migration 00003) and when it is forgotten, on the Manager's clock.
type keyEntry struct {
	Key     string
	Pos     agent.Position
	Hash    [32]byte
	Expires time.Time
}

// keySet is the bounded set of a session's idempotency keys: at most max
// keys (the oldest forgotten first), each until its expiry. Not safe for
// concurrent use (the actor owns it).
type keySet struct {
	max   int
	order []keyEntry // oldest first
	index map[string]keyEntry
	// spilled is set once the set may have forgotten a live key: it
	// evicted one, or the thaw loaded the bound (the store may hold more).
	// A miss must then be asked of the store (SessionStore.LookupKey).
	spilled bool
}

// newKeySet returns a set holding the thawed keys recs (oldest first),
// each expiring ttl after it was accepted: now + ttl - its age.
func newKeySet(max int, ttl time.Duration, now time.Time, recs []KeyRecord) *keySet {
	k := &keySet{max: max, index: make(map[string]keyEntry)}
	for _, r := range recs {
		k.add(keyEntry{Key: r.Key, Pos: agent.Position{Epoch: r.Epoch, Seq: r.Seq}, Hash: r.BodyHash, Expires: now.Add(ttl - r.Age)})
	}
	k.spilled = k.spilled || max > 0 && len(recs) >= max
	return k
}

// lookup returns key's entry if it is remembered and not expired at now.
func (k *keySet) lookup(key string, now time.Time) (keyEntry, bool) {
	e, ok := k.index[key]
	if !ok || !now.Before(e.Expires) {
		return keyEntry{}, false
	}
	return e, true
}

// add remembers e (replacing an expired entry of the same key), evicting
// the oldest keys beyond the bound.
func (k *keySet) add(e keyEntry) {
	if e.Key == "" || k.max <= 0 {
		return
	}
	if _, ok := k.index[e.Key]; ok {
		for i := range k.order {
			if k.order[i].Key == e.Key {
				k.order = append(k.order[:i:i], k.order[i+1:]...)
				break
			}
		}
	}
	k.index[e.Key] = e
	k.order = append(k.order, e)
	if n := len(k.order) - k.max; n > 0 {
		k.spilled = true
		for _, old := range k.order[:n] {
			delete(k.index, old.Key)
		}
		k.order = append([]keyEntry(nil), k.order[n:]...)
	}
}
