// Package session runs conversational agent sessions with single-writer
// ownership: the lease and epoch fence, the per-session actor, the heartbeat
// renewer and the replay log; it runs the turns of an agent.Agent (package
// agent holds the contract). Manager.Submit routes an
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
	"errors"
)

// Topic returns the channel topic for a session id: "session:<id>".
func Topic(id string) string { return "session:" + id }

// ErrInvalidID is returned for a session id that fails ValidID.
var ErrInvalidID = errors.New("session: invalid session id")
