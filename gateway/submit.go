package gateway

import (
	"context"

	"github.com/relaygw/relay/agent"
)

// submit is the one write path for events, from HTTP and from channel
// pushes: session.Manager.Submit routes the event (runs it here, forwards it
// to the owner node, or refuses it) and answer maps its outcome to the
// documented reply.
func (n *Node) submit(ctx context.Context, id string, in agent.Input) (acceptedBody, *apiError) {
	return n.answer(n.manager.Submit(ctx, id, in))
}
