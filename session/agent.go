package session

import (
	"context"
	"encoding/json"
)

// Message is one entry of a conversation's history.
type Message struct {
	Role    string `json:"role"` // "user" or "assistant"
	Content string `json:"content"`
}

// Turn is the input of one agent turn.
type Turn struct {
	Session string
	Input   Input
	History []Message // the conversation before this turn, read-only
}

// Input is an event posted into a session, over HTTP or a channel push.
// JSON shape: {"type":…, "data":{…}, "idempotency_key":…}.
type Input struct {
	Type           string          `json:"type"`
	Data           json.RawMessage `json:"data"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
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
