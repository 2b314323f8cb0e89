package agent

import (
	"context"
	"encoding/json"
	"errors"
)

// Message is one entry of a conversation's history.
type Message struct {
	Role    string `json:"role"` // "user" or "assistant"
	Content string `json:"content"`
	// Stopped marks an assistant reply cut short by a stop (a client's
	// stop, or a double-texting interrupt): Content is the partial reply
	// streamed before the turn was stopped (docs/OWNERSHIP.md "Turn
	// control").
	Stopped bool `json:"stopped,omitempty"`
}

// Turn is the input of one agent turn.
type Turn struct {
	Session string
	// ID is the position of the turn's input in the session's stream
	// (written "<epoch>-<seq>", e.g. 3-17): unique within the session and
	// the same on every run of the turn, on any owner; the turn id a client
	// names in a stop.
	ID Position
	// Attempt is this run's attempt number: 1 for the turn's first run,
	// then 2, 3, … for each resume or restart on a later owner.
	Attempt int
	Input   Input
	History []Message // the conversation before this turn, read-only
	// Resume is set when this run continues a turn an earlier owner left
	// unfinished (killed, lease lost, drained past its window), and only
	// for an Agent whose Resumable reports true: the agent emits the rest
	// of its output after Resume.Text and returns the WHOLE reply (the
	// partial text included) as its message. Nil for a turn's first run
	// and for a restarted one (docs/OWNERSHIP.md "Turn journal and resume").
	Resume *TurnResume
	// Answer is set for a continuation turn: the input answers the
	// interrupt the previous turn ended with (Answer.Interrupt) with
	// Answer.Value (docs/OWNERSHIP.md "Interrupts"). An agent ends a turn
	// with a question by emitting TypeInterrupt with {"id","kind",
	// "payload","expires_at"} and returning; it may emit nothing after it.
	Answer *InterruptAnswer
}

// TurnResume is what a resumed turn starts from: its journal, read from
// the replay log by the new owner.
type TurnResume struct {
	// Attempt is this run's attempt number (2, 3, …; the turn's first run
	// is attempt 1).
	Attempt int
	// From is the position of the last journaled event the run continues
	// after.
	From Position
	// Text is the partial output so far: the data.text of the turn's delta
	// events, concatenated in order.
	Text string
	// Events is the whole journal, oldest first: the turn's turn_started,
	// any turn_resumed, and every event the agent emitted (deltas and its
	// own types), at whatever epochs they were emitted. Read-only.
	Events []Event
}

// Input is an event posted into a session, over HTTP or a channel push.
// JSON shape: {"type":…, "data":{…}, "idempotency_key":…}.
type Input struct {
	Type           string          `json:"type"`
	Data           json.RawMessage `json:"data"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	// Multitask is what the input does if it arrives while a turn runs:
	// "enqueue", "reject" or "interrupt" ("": the session's mode, else
	// session.Config.DoubleTexting). It is applied when the input is accepted and
	// not stored with it; on the session's first input it is stored as the
	// session's mode instead (docs/OWNERSHIP.md "Turn control").
	Multitask string `json:"multitask,omitempty"`
}

// Emit publishes a partial result of a running turn (a "delta" event with the
// given data). It returns an error when the turn must stop (fenced, cancelled);
// the agent should then return promptly.
type Emit func(ctx context.Context, typ string, data any) error

// Agent runs turns. Run is called once per turn, never concurrently for one
// session. It streams partial output through emit and returns the final
// assistant message. ctx is cancelled when the turn must stop (the lease could
// lapse, the session was fenced, or the node is shutting down).
type Agent interface {
	Run(ctx context.Context, turn Turn, emit Emit) (Message, error)
}

// Resumer is implemented by an Agent that can continue a turn from its
// journal (Turn.Resume). An Agent that does not implement it, or whose
// Resumable reports false, has an unfinished turn restarted from the
// beginning on the next owner, with a new turn_started and the attempt
// number incremented.
type Resumer interface {
	Resumable() bool
}

// TypeTurnStopped is the event that ends a stopped turn:
//
//	turn_stopped {"turn":{"epoch":E,"seq":S},"partial":"…"}
//
// turn is the position of the turn's input (its user_event) and partial
// the reply streamed before the stop (the data.text of its deltas,
// concatenated). The history keeps partial as the assistant message with
// "stopped":true.
const TypeTurnStopped = "turn_stopped"

// ErrTurnStopped is the cause of a stopped turn's context
// (context.Cause(ctx) in Agent.Run): a client stopped the turn, or a new
// input interrupted it. The agent should return promptly; what it returns
// is not used (the partial reply streamed so far is).
var ErrTurnStopped = errors.New("agent: turn stopped")
