package presence

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Replica message kinds (docs/PHOENIX.md §5.4).
const (
	repDelta  = "delta"  // the sender's local changes of one broadcast period, per topic
	repState  = "state"  // the sender's full local presences of some topics, answering a want
	repDigest = "digest" // the sender's clock per topic with local presences, every digest interval
	repWant   = "want"   // "send me your state of these topics (or of all)"
)

// maxStateParts bounds the parts of one topic's state transfer.
const maxStateParts = 1 << 16

// repMsg is the JSON body of every Replica message:
//
//	{"k":"delta","inc":I,"t":[{"t":"session:a","p":3,"c":5,"j":[{"k":"alice","r":"REF","m":{"phx_ref":"REF",…}}],"l":["REF2"]}]}
//	{"k":"state","inc":I,"t":[{"t":"session:a","c":5,"part":0,"parts":1,"j":[…]}]}
//	{"k":"digest","inc":I,"g":9,"d":{"session:a":5}}
//	{"k":"want","inc":I,"w":["session:a"]}   or   {"k":"want","inc":I,"all":true}
//
// inc is the sender's incarnation, except in a want, where it names the
// incarnation of the node asked (a want for an incarnation the node no longer
// runs is ignored). Clocks count the sender's local changes within its
// incarnation: a topic's clock is the sender's clock at its latest local
// change of that topic, so a delta from p to c applies only to a replica of
// that topic at p, and a state at c replaces any replica below or at c.
type repMsg struct {
	Kind   string            `json:"k"`
	Inc    uint64            `json:"inc"`
	Clock  uint64            `json:"g,omitempty"`
	Topics []repTopic        `json:"t,omitempty"`
	Digest map[string]uint64 `json:"d,omitempty"`
	Want   []string          `json:"w,omitempty"`
	All    bool              `json:"all,omitempty"`
}

// repTopic is one topic of a delta or state.
type repTopic struct {
	Topic  string     `json:"t"`
	Prev   uint64     `json:"p,omitempty"`
	Clock  uint64     `json:"c"`
	Part   int        `json:"part,omitempty"`
	Parts  int        `json:"parts,omitempty"`
	Joins  []repEntry `json:"j,omitempty"`
	Leaves []string   `json:"l,omitempty"`
}

// repEntry is one presence: its key, its phx_ref and its meta, a JSON
// object whose phx_ref field equals Ref.
type repEntry struct {
	Key  string          `json:"k"`
	Ref  string          `json:"r"`
	Meta json.RawMessage `json:"m"`
}

func encodeRep(m *repMsg) []byte {
	b, err := json.Marshal(m)
	if err != nil {
		// Strings, integers and metas that were valid JSON objects when
		// tracked or decoded always marshal.
		panic(fmt.Sprintf("presence: encode replica message: %v", err))
	}
	return b
}

// decodeRep parses and validates a Replica message. Every error wraps
// ErrBadMessage; a message that fails is ignored whole, so bad input
// changes nothing.
func decodeRep(b []byte) (*repMsg, error) {
	var m repMsg
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	bad := func(format string, a ...any) (*repMsg, error) {
		return nil, fmt.Errorf("%w: %s", ErrBadMessage, fmt.Sprintf(format, a...))
	}
	if m.Inc == 0 {
		return bad("%s without an incarnation", m.Kind)
	}
	switch m.Kind {
	case repDelta, repState:
		if m.Digest != nil || m.Want != nil || m.All || m.Clock != 0 {
			return bad("%s with digest or want fields", m.Kind)
		}
		for i := range m.Topics {
			t := &m.Topics[i]
			if t.Topic == "" || t.Clock == 0 {
				return bad("%s topic %d without a name or clock", m.Kind, i)
			}
			if m.Kind == repDelta {
				if t.Prev >= t.Clock || t.Parts != 0 || t.Part != 0 {
					return bad("delta of %q from %d to %d", t.Topic, t.Prev, t.Clock)
				}
			} else {
				if t.Prev != 0 || len(t.Leaves) != 0 || t.Parts < 1 || t.Parts > maxStateParts || t.Part < 0 || t.Part >= t.Parts {
					return bad("state of %q part %d of %d", t.Topic, t.Part, t.Parts)
				}
			}
			for _, e := range t.Joins {
				if err := checkEntry(e); err != nil {
					return nil, err
				}
			}
			for _, r := range t.Leaves {
				if r == "" {
					return bad("empty leave ref in %q", t.Topic)
				}
			}
		}
	case repDigest:
		if m.Topics != nil || m.Want != nil || m.All || m.Clock == 0 {
			return bad("digest without a clock, or with topics")
		}
		for t, c := range m.Digest {
			if t == "" || c == 0 || c > m.Clock {
				return bad("digest entry %q at %d (clock %d)", t, c, m.Clock)
			}
		}
	case repWant:
		if m.Topics != nil || m.Digest != nil || m.Clock != 0 || (m.All && m.Want != nil) {
			return bad("want with other fields")
		}
		for _, t := range m.Want {
			if t == "" {
				return bad("want of an empty topic")
			}
		}
	default:
		return bad("unknown kind %q", m.Kind)
	}
	return &m, nil
}

// checkEntry validates one replicated presence: a key, a ref, and a meta
// that is a JSON object carrying the same phx_ref.
func checkEntry(e repEntry) error {
	if e.Key == "" || e.Ref == "" {
		return fmt.Errorf("%w: presence without a key or ref", ErrBadMessage)
	}
	if m := bytes.TrimSpace(e.Meta); len(m) == 0 || m[0] != '{' {
		return fmt.Errorf("%w: meta of %q is not an object", ErrBadMessage, e.Ref)
	}
	var ref struct {
		Ref *string `json:"phx_ref"`
	}
	if err := json.Unmarshal(e.Meta, &ref); err != nil || ref.Ref == nil || *ref.Ref != e.Ref {
		return fmt.Errorf("%w: meta of %q does not carry its phx_ref", ErrBadMessage, e.Ref)
	}
	return nil
}
