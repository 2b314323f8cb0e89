package presence

import (
	"context"
	"time"
)

// SyncNow broadcasts the local counts at once, as the interval timer does.
func (c *Census) SyncNow() { c.broadcastCounts(context.Background()) }

// HelloNow broadcasts a hello at once, as the re-discover timer does.
func (c *Census) HelloNow() { c.hello(context.Background(), "") }

// ExpireAt drops the peers that would have timed out at now.
func (c *Census) ExpireAt(now time.Time) { c.expire(now) }

// Decode exposes the wire decoder to the fuzz target.
func Decode(b []byte) error { _, err := decodeCensus(b); return err }

// Encode builds a Census message for tests that play a peer by hand.
func Encode(kind string, inc, seq uint64, counts map[string]int) []byte {
	return encodeCensus(censusMsg{Kind: kind, Inc: inc, Seq: seq, Counts: counts})
}

// Deliver hands msg to the Census as if node from had sent it.
func (c *Census) Deliver(from string, msg []byte) { c.handle(from, msg, time.Now()) }

// EncodeDelta builds a one-presence delta as node incarnation inc sends it.
func EncodeDelta(inc uint64, topic string, prev, clock uint64, key, ref string) []byte {
	return encodeRep(&repMsg{Kind: repDelta, Inc: inc, Topics: []repTopic{{Topic: topic, Prev: prev, Clock: clock,
		Joins: []repEntry{{Key: key, Ref: ref, Meta: []byte(`{"phx_ref":"` + ref + `"}`)}}}}})
}

// ReplicaRoundTrip decodes a replica message and re-encodes what it
// accepted.
func ReplicaRoundTrip(b []byte) ([]byte, bool) {
	m, err := decodeRep(b)
	if err != nil {
		return nil, false
	}
	return encodeRep(m), true
}
