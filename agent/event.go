package agent

import (
	"encoding/json"
	"fmt"
	"time"
)

// Event types published on a session topic.
const (
	TypeUserEvent     = "user_event"
	TypeTurnStarted   = "turn_started"
	TypeTurnResumed   = "turn_resumed"
	TypeDelta         = "delta"
	TypeMessage       = "message"
	TypeTurnCompleted = "turn_completed"
	TypeTurnFailed    = "turn_failed"
)

// Position orders events of one session: by Epoch, then by Seq. Seq keeps
// growing across epochs (a new owner continues from the stored seq), but
// only the (Epoch, Seq) pair is guaranteed to grow, because events a dead or
// fenced owner emitted after its last store write keep their old epoch.
type Position struct {
	Epoch int64 `json:"epoch"`
	Seq   int64 `json:"seq"`
}

// Less reports whether p comes strictly before q.
func (p Position) Less(q Position) bool {
	if p.Epoch != q.Epoch {
		return p.Epoch < q.Epoch
	}
	return p.Seq < q.Seq
}

// IsZero reports whether p is the position before any event.
func (p Position) IsZero() bool { return p.Epoch == 0 && p.Seq == 0 }

func (p Position) String() string { return fmt.Sprintf("%d-%d", p.Epoch, p.Seq) }

// Event is one entry of a session's stream, as pushed to sockets and stored in
// the replay log. Wire shape (docs/OWNERSHIP.md "Wire contracts"):
//
//	{"session":id, "epoch":E, "seq":S, "type":…, "data":{…}, "at":RFC3339}
//
// The first event an epoch publishes for a session that an earlier epoch
// wrote also carries "prev":{"epoch":E0,"seq":S0}: where the previous epoch
// ended (docs/OWNERSHIP.md "Turn journal and resume").
type Event struct {
	Session string          `json:"session"`
	Epoch   int64           `json:"epoch"`
	Seq     int64           `json:"seq"`
	Type    string          `json:"type"`
	Data    json.RawMessage `json:"data"`
	At      time.Time       `json:"at"`
	// Prev, set only on the first event of an epoch that took the session
	// over, is the position of the previous epoch's last event as the new
	// owner found it: the replay log's last event when the log reached back
	// to the stored seq, else the stored (epoch, seq). A reader whose last
	// event is before Prev missed the previous epoch's tail (session.Replay
	// reports it as replay_truncated).
	Prev *Position `json:"prev,omitempty"`
}

// Pos returns the event's position.
func (e Event) Pos() Position { return Position{Epoch: e.Epoch, Seq: e.Seq} }
