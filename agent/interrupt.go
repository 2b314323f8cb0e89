package agent

import (
	"encoding/json"
	"time"
)

// Interrupts (docs/OWNERSHIP.md "Interrupts"): an agent ends a turn by
// asking the people watching (approve a tool call, pick an option). The
// interrupt is written to the history with the turn's end, so it is as
// durable as a completed turn and survives any takeover; it is published
// as the turn's last event and stays in the replay log. A client answers
// it with a "resume" input, routed like any event; the first answer the
// owner accepts wins and its turn (the continuation) gets the answer in
// Turn.Answer.

// Event and input types of interrupts.
const (
	// TypeInterrupt is emitted by an agent (data: Interrupt without turn)
	// to end its turn with a question, and published by the actor as the
	// turn's last event with Interrupt's whole wire shape.
	TypeInterrupt = "interrupt"
	// TypeInterruptExpired is published when an open interrupt's
	// expires_at passes without an answer: {"interrupt":id,"turn":{…}}.
	TypeInterruptExpired = "interrupt_expired"
	// TypeResume is the input type of an answer:
	// {"type":"resume","data":{"interrupt":id,"value":…}}.
	TypeResume = "resume"
	// RoleInterrupt is the history role of an interrupt: the message's
	// content is the Interrupt as JSON.
	RoleInterrupt = "interrupt"
)

// Interrupt is a question an agent ended its turn with. Wire shape (the
// interrupt event's data, and a RoleInterrupt history message's content):
//
//	{"id":"…","kind":"…","payload":{…},"expires_at":RFC3339,"turn":{"epoch","seq"}}
//
// ID is 1 to 128 characters of [A-Za-z0-9_.:-]; Kind 1 to 64 characters
// (e.g. "approval"); Payload is any JSON the agent chose (absent: null);
// ExpiresAt is optional; Turn is the position of the input of the turn that
// asked (set by the actor).
type Interrupt struct {
	ID        string          `json:"id"`
	Kind      string          `json:"kind"`
	Payload   json.RawMessage `json:"payload,omitempty"`
	ExpiresAt *time.Time      `json:"expires_at,omitempty"`
	Turn      Position        `json:"turn"`
}

// InterruptAnswer is what a continuation turn gets (Turn.Answer): the
// interrupt it answers and the client's value (any JSON).
type InterruptAnswer struct {
	Interrupt Interrupt
	Value     json.RawMessage
}
