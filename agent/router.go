// Package agent is the contract between the gateway and an agent: Agent
// (and Resumer) run turns (Turn, TurnResume, Message, Emit); Input and its
// input contract (ValidateInput); the events a session stream carries
// (Event, Position, the Type constants) and the interrupts an agent ends a
// turn with (Interrupt, InterruptAnswer). It imports no store, broker or
// session code, so an agent links none of them. It also holds what the
// agent backends share: the Router that gives each session the backend its
// id's prefix selects (AGENT_ROUTES). The backends live in subpackages
// (httpagent, openai).
package agent

import (
	"context"
	"sort"
	"strings"
)

// Route sends the sessions whose id starts with Prefix to Agent.
type Route struct {
	Prefix string
	Agent  Agent
}

// Router is a Agent that runs each turn on the agent of the
// longest Route prefix matching the turn's session id, else on Default. It
// is a Resumer that resumes when every agent it routes to does
// (the session manager asks once, not per session).
type Router struct {
	def    Agent
	routes []Route // longest prefix first
}

var (
	_ Agent   = (*Router)(nil)
	_ Resumer = (*Router)(nil)
)

// NewRouter returns a Router over def and routes (copied).
func NewRouter(def Agent, routes []Route) *Router {
	rs := append([]Route(nil), routes...)
	sort.SliceStable(rs, func(i, j int) bool { return len(rs[i].Prefix) > len(rs[j].Prefix) })
	return &Router{def: def, routes: rs}
}

// For returns the agent that runs the turns of session id.
func (r *Router) For(id string) Agent {
	for _, rt := range r.routes {
		if strings.HasPrefix(id, rt.Prefix) {
			return rt.Agent
		}
	}
	return r.def
}

// Run implements Agent.
func (r *Router) Run(ctx context.Context, turn Turn, emit Emit) (Message, error) {
	return r.For(turn.Session).Run(ctx, turn, emit)
}

// Resumable implements Resumer.
func (r *Router) Resumable() bool {
	if !resumes(r.def) {
		return false
	}
	for _, rt := range r.routes {
		if !resumes(rt.Agent) {
			return false
		}
	}
	return true
}

func resumes(ag Agent) bool {
	res, ok := ag.(Resumer)
	return ok && res.Resumable()
}
