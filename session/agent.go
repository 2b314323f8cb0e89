package session

import (
	"github.com/relaygw/relay/agent"
)

// resumable reports whether ag continues unfinished turns.
func resumable(ag agent.Agent) bool {
	r, ok := ag.(agent.Resumer)
	return ok && r.Resumable()
}

// Resumable implements Resumer for the StorableOutput wrapper: it resumes
// when the agent it wraps does.
func (s storableAgent) Resumable() bool { return resumable(s.Agent) }
