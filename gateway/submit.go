package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/relaygw/relay/session"
	"go.uber.org/zap"
)

// submit is the one write path for events, from HTTP and from channel
// pushes. The event runs here when this node owns (or can claim) the
// session; otherwise it is forwarded to the owner. Outcomes of a forward
// (docs/OWNERSHIP.md "Event (write)"): accepted → accepted; timeout or remote error →
// surfaced with its own code (the event may have been accepted there); no
// responders or lost connection → re-resolve with a fresh claim and forward
// again or take over; a second unreachable hop → a retry directive. Nothing
// runs here while another node's lease is live.
func (n *Node) submit(ctx context.Context, id string, in session.Input) (acceptedBody, *apiError) {
	if n.draining.Load() {
		return acceptedBody{}, n.refusal(id, session.ErrDraining)
	}
	acc, err := n.submitLocal(ctx, id, in)
	var held *session.LeaseHeldError
	if err == nil || !errors.As(err, &held) || n.nc == nil {
		if err != nil {
			return acceptedBody{}, n.refusal(id, err)
		}
		return acc, nil
	}
	unreachable := 0
	for hop := 0; hop < 4; hop++ {
		if held.Holder != n.Owner() && nodeOf(held.Holder) == n.name {
			// A predecessor process under this node's name holds the lease:
			// it is gone (this process took the name), so nothing can be
			// forwarded; the client retries once the lease lapses.
			return acceptedBody{}, n.refusal(id, held)
		}
		if held.Holder == n.Owner() {
			// The lease moved back to us between the claim and the forward.
			if acc, err = n.submitLocal(ctx, id, in); err == nil {
				return acc, nil
			} else if !errors.As(err, &held) {
				return acceptedBody{}, n.refusal(id, err)
			}
			continue
		}
		acc, moved, ferr := n.forward(ctx, held.Holder, id, in)
		var ae *apiError
		switch {
		case ferr == nil && moved == nil:
			return acc, nil
		case moved != nil:
			held = moved
		case errors.Is(ferr, errUnreachable):
			unreachable++
			n.log.Info("owner unreachable; re-resolving with a fresh claim", zap.String("session", id), zap.String("owner", held.Holder), zap.Error(ferr))
			if unreachable >= 2 {
				return acceptedBody{}, n.refusal(id, held)
			}
			acc, err = n.submitLocal(ctx, id, in)
			if err == nil {
				return acc, nil
			}
			if !errors.As(err, &held) {
				return acceptedBody{}, n.refusal(id, err)
			}
		case errors.As(ferr, &ae):
			n.metrics.refused.WithLabelValues(ae.Code).Inc()
			return acceptedBody{}, ae
		default:
			return acceptedBody{}, n.refusal(id, ferr)
		}
	}
	return acceptedBody{}, n.refusal(id, held)
}

// submitLocal hands in to this node's session manager, which claims the lease
// first (one statement) and runs the event only as the owner.
func (n *Node) submitLocal(ctx context.Context, id string, in session.Input) (acceptedBody, error) {
	acc, err := n.manager.Submit(ctx, id, in)
	if err != nil {
		return acceptedBody{}, err
	}
	n.metrics.accepted.Inc()
	return acceptedBody{Session: acc.Session, Epoch: acc.Epoch, Seq: acc.Seq, Duplicate: acc.Duplicate}, nil
}

// refusal turns a session-layer error into the documented answer and counts it.
func (n *Node) refusal(id string, err error) *apiError {
	ae := classify(err, n.cfg.LeaseTTL)
	if ae.Code == CodeInternal {
		// The manager reports an undecidable lease (store unreachable) as a
		// plain error: refuse with a retry directive, never run unfenced.
		n.log.Warn("event refused: lease store unavailable", zap.String("session", id), zap.Error(err))
		ae = classify(fmt.Errorf("%w: %w", errStoreUnavailable, err), n.cfg.LeaseTTL)
	}
	n.metrics.refused.WithLabelValues(ae.Code).Inc()
	return ae
}
