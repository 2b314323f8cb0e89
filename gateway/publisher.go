package gateway

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/relaygw/relay/channels"
	"github.com/relaygw/relay/session"
)

// hubPublisher delivers session events to this node's sockets: the event is
// encoded once and the hub enqueues the same frame bytes to every subscriber.
// The event's position rides along as the broadcast's Meta so a joining
// channel can drop live events it already replayed.
type hubPublisher struct {
	hub *channels.Hub
	m   *metrics
}

func (p hubPublisher) Publish(_ context.Context, ev session.Event) error {
	payload, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("gateway: encode event %s/%s: %w", ev.Session, ev.Pos(), err)
	}
	p.m.published.Inc()
	d := p.hub.Broadcast(session.Topic(ev.Session), ev.Type, payload, ev.Pos())
	p.m.deliveries.Add(float64(d))
	return nil
}
