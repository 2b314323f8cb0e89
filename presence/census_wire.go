package presence

import (
	"encoding/json"
	"fmt"
)

// Census message kinds.
const (
	kindHello  = "hello"  // "I am here": broadcast at start and on every re-discover, or sent to one node
	kindAck    = "ack"    // answer to hello, sent to the hello's sender
	kindCounts = "counts" // the sender's local counts, broadcast on every interval
	kindBye    = "bye"    // the sender stops
	// kindExpelled tells a node that its incarnation inc was declared dead
	// (it stayed silent past the peer timeout, or a newer incarnation of it
	// registered): its messages are ignored until it takes a new
	// incarnation, which it does on receipt.
	kindExpelled = "expelled"
)

// censusMsg is the JSON body of every Census message:
//
//	{"k":"counts","inc":1718000000000000000,"seq":7,"c":{"session:a":2}}
//
// inc is the sender's incarnation (it grows across restarts of a node), seq
// numbers the sender's counts broadcasts within the incarnation, and c holds
// its non-zero local counts (counts messages only).
type censusMsg struct {
	Kind   string         `json:"k"`
	Inc    uint64         `json:"inc"`
	Seq    uint64         `json:"seq,omitempty"`
	Counts map[string]int `json:"c,omitempty"`
}

func encodeCensus(m censusMsg) []byte {
	b, err := json.Marshal(m)
	if err != nil {
		// A struct of strings, integers and a string→int map always
		// marshals.
		panic(fmt.Sprintf("presence: encode census message: %v", err))
	}
	return b
}

// decodeCensus parses a Census message. It returns ErrBadMessage (wrapped)
// for malformed JSON, an unknown kind, a zero incarnation or a negative
// count.
func decodeCensus(b []byte) (censusMsg, error) {
	var m censusMsg
	if err := json.Unmarshal(b, &m); err != nil {
		return censusMsg{}, fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	switch m.Kind {
	case kindHello, kindAck, kindBye, kindExpelled:
	case kindCounts:
		for g, n := range m.Counts {
			if n < 0 {
				return censusMsg{}, fmt.Errorf("%w: negative count %d for group %q", ErrBadMessage, n, g)
			}
		}
	default:
		return censusMsg{}, fmt.Errorf("%w: unknown kind %q", ErrBadMessage, m.Kind)
	}
	if m.Inc == 0 {
		return censusMsg{}, fmt.Errorf("%w: zero incarnation", ErrBadMessage)
	}
	return m, nil
}
