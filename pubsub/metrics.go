package pubsub

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Error operations, the "op" label of relay_pubsub_errors_total.
const (
	OpSend   = "send"   // a Send to one node failed
	OpFlood  = "flood"  // a flood (transport Broadcast) failed
	OpDecode = "decode" // an inbound message was not a version-1 message
	OpJoin   = "join"   // joining a topic's Muster group (or subscribing to its subject) failed
	OpBus    = "bus"    // the NATS connection of RoutingSubjects or RoutingFlood reported an error (a slow consumer drop)
)

// Metrics are PubSub's Prometheus counters, served on /metrics. NewMetrics
// registers them.
type Metrics struct {
	Published  prometheus.Counter // relay_events_published_total: events published by this node
	Deliveries prometheus.Counter // relay_deliveries_total: event frames enqueued to local sockets
	// DeliveryLatency is relay_delivery_latency_seconds: from an event's
	// "at" (set by the owner as it emits) to its frame enqueued to this
	// node's sockets, sampled (DeliverySample). Across nodes it includes
	// their clock difference.
	DeliveryLatency prometheus.Histogram
	NodeMessages    prometheus.Counter     // relay_pubsub_node_messages_total: messages sent to other nodes
	Floods          prometheus.Counter     // relay_pubsub_floods_total: floods started
	SentBytes       prometheus.Counter     // relay_pubsub_sent_bytes_total: bytes of the messages counted by NodeMessages and Floods
	Errors          *prometheus.CounterVec // relay_pubsub_errors_total{op}: failures by Op*
	// Sequencer's counters.
	ReorderHeld    prometheus.Counter // relay_reorder_held_total: events that arrived ahead of a missing one and waited
	ReorderDropped prometheus.Counter // relay_reorder_dropped_total: events at or before one already handed on (second copies, late arrivals)
	ReorderGaps    prometheus.Counter // relay_reorder_gaps_total: reorder windows that ran out (or overflowed) with an event still missing
}

// NewMetrics creates the counters on reg (a nil reg registers nowhere, for
// tests that read only Counts). Registering twice on one registry panics.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	counter := func(name, help string) prometheus.Counter {
		return f.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &Metrics{
		Published:  counter("relay_events_published_total", "Session events published by this node."),
		Deliveries: counter("relay_deliveries_total", "Event frames enqueued to local sockets."),
		DeliveryLatency: f.NewHistogram(prometheus.HistogramOpts{Name: "relay_delivery_latency_seconds",
			Help:    "Time from an event's emit on the owner (its \"at\") to its frame enqueued to this node's sockets; the first and then every 16th delivering broadcast is sampled. Across nodes it includes their clock difference.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}}),
		NodeMessages:   counter("relay_pubsub_node_messages_total", "Event messages sent to other nodes (routed to a router or delivered to a target)."),
		Floods:         counter("relay_pubsub_floods_total", "Events flooded to every node because the routing table could not be trusted."),
		SentBytes:      counter("relay_pubsub_sent_bytes_total", "Bytes of the event messages this node handed to NATS (sends, floods, and subject publications under PUBSUB_ROUTING=subjects or flood), envelope included."),
		ReorderHeld:    counter("relay_reorder_held_total", "Session events that arrived at this node ahead of a missing one and waited in the reorder window."),
		ReorderDropped: counter("relay_reorder_dropped_total", "Session events dropped at this node because one at or after them was already handed to its sockets (a second copy, or a late arrival)."),
		ReorderGaps:    counter("relay_reorder_gaps_total", "Reorder windows that ran out, or overflowed, with an event still missing: the held events went out and clients see a seq jump."),
		Errors: f.NewCounterVec(prometheus.CounterOpts{Name: "relay_pubsub_errors_total",
			Help: "Routed-delivery failures by op: send, flood (transport errors), decode (malformed or unknown-version messages), join (Muster group join or topic subscription), bus (NATS errors under PUBSUB_ROUTING=subjects or flood)."}, []string{"op"}),
	}
	for _, op := range []string{OpSend, OpFlood, OpDecode, OpJoin, OpBus} {
		m.Errors.WithLabelValues(op) // every op shows from the first scrape, at 0
	}
	return m
}
