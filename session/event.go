// Package session runs conversational agent sessions with single-writer
// ownership: the lease and epoch fence, the per-session actor, the heartbeat
// renewer, the replay log and the agent interface. Manager.Submit routes an
// input taken in on any node to the session's owner (claim, forward through
// a Forwarder, re-resolve, hop limit) and answers one Outcome.
//
// The design follows docs/OWNERSHIP.md ("Ownership: the lease",
// "The fence", "Takeover and recovery"): ownership is a durable lease row
// decided on the store's clock; every session store write carries the writer's
// epoch and lands only if no newer epoch has written; a fenced writer halts
// its turn, publishes nothing more for it and stands the session down.
package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
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
	// event is before Prev missed the previous epoch's tail (Replay
	// reports it as replay_truncated).
	Prev *Position `json:"prev,omitempty"`
}

// Pos returns the event's position.
func (e Event) Pos() Position { return Position{Epoch: e.Epoch, Seq: e.Seq} }

// Topic returns the channel topic for a session id: "session:<id>".
func Topic(id string) string { return "session:" + id }

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// ValidID reports whether id is a valid session id: 1–128 characters of
// [A-Za-z0-9_.:-] (docs/OWNERSHIP.md "Wire contracts").
func ValidID(id string) bool { return idPattern.MatchString(id) }

// ErrInvalidID is returned for a session id that fails ValidID.
var ErrInvalidID = errors.New("session: invalid session id")
