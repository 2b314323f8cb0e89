package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the node's Prometheus collectors, on a registry of its own so
// several nodes can live in one test process.
type metrics struct {
	reg          *prometheus.Registry
	accepted     prometheus.Counter
	refused      *prometheus.CounterVec
	published    prometheus.Counter
	deliveries   prometheus.Counter
	replayed     prometheus.Counter
	replayErrors prometheus.Counter
	authFailures prometheus.Counter
	nodeMessages prometheus.Counter
	floods       prometheus.Counter
	forwards     prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_events_accepted_total", Help: "Events accepted into sessions owned by this node."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_events_refused_total", Help: "Events refused, by error code."}, []string{"code"}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_events_published_total", Help: "Session events published by this node."}),
		deliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_deliveries_total", Help: "Event frames enqueued to local sockets."}),
		replayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_replayed_events_total", Help: "Events replayed to joining sockets."}),
		replayErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_replay_errors_total", Help: "Joins whose replay read failed (recovered:false)."}),
		authFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_socket_auth_failures_total", Help: "Sockets refused for a missing or invalid token."}),
		nodeMessages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_pubsub_node_messages_total", Help: "Event messages sent to other nodes (routed to a router or delivered to a target)."}),
		forwards: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_forwards_total", Help: "Events forwarded to the owner node."}),
		floods: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_pubsub_floods_total", Help: "Events flooded to every node because the routing table could not be trusted."}),
	}
	m.reg.MustRegister(m.accepted, m.refused, m.published, m.deliveries, m.replayed, m.replayErrors, m.authFailures, m.nodeMessages, m.floods, m.forwards,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// registerNode adds gauges read from the node's parts at scrape time.
func (m *metrics) registerNode(n *Node) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "relay_sockets", Help: "Open WebSocket connections."},
			func() float64 { return float64(n.endpoint.Stats().SocketsOpen) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "relay_slow_consumer_disconnects_total", Help: "Sockets cut because their outbound queue overflowed."},
			func() float64 { return float64(n.endpoint.Stats().SlowConsumers) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "relay_bad_frames_total", Help: "Inbound frames that could not be decoded."},
			func() float64 { return float64(n.endpoint.Stats().BadFrames) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "relay_sessions_live", Help: "Session actors running on this node."},
			func() float64 { return float64(len(n.manager.Sessions())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "relay_draining", Help: "1 while the node drains."},
			func() float64 {
				if n.draining.Load() {
					return 1
				}
				return 0
			}),
	)
}
