// Package agent holds what the agent backends share: the Router that
// gives each session the backend its id's prefix selects (AGENT_ROUTES).
// The backends live in subpackages (httpagent).
package agent

import (
	"context"
	"sort"
	"strings"

	"github.com/relaygw/relay/session"
)

// Route sends the sessions whose id starts with Prefix to Agent.
type Route struct {
	Prefix string
	Agent  session.Agent
}

// Router is a session.Agent that runs each turn on the agent of the
// longest Route prefix matching the turn's session id, else on Default. It
// is a session.Resumer that resumes when every agent it routes to does
// (the session manager asks once, not per session).
type Router struct {
	def    session.Agent
	routes []Route // longest prefix first
}

var (
	_ session.Agent   = (*Router)(nil)
	_ session.Resumer = (*Router)(nil)
)

// NewRouter returns a Router over def and routes (copied).
func NewRouter(def session.Agent, routes []Route) *Router {
	rs := append([]Route(nil), routes...)
	sort.SliceStable(rs, func(i, j int) bool { return len(rs[i].Prefix) > len(rs[j].Prefix) })
	return &Router{def: def, routes: rs}
}

// For returns the agent that runs the turns of session id.
func (r *Router) For(id string) session.Agent {
	for _, rt := range r.routes {
		if strings.HasPrefix(id, rt.Prefix) {
			return rt.Agent
		}
	}
	return r.def
}

// Run implements session.Agent.
func (r *Router) Run(ctx context.Context, turn session.Turn, emit session.Emit) (session.Message, error) {
	return r.For(turn.Session).Run(ctx, turn, emit)
}

// Resumable implements session.Resumer.
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

func resumes(ag session.Agent) bool {
	res, ok := ag.(session.Resumer)
	return ok && res.Resumable()
}
