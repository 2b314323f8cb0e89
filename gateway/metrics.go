package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/relaygw/relay/internal/buildinfo"
	"github.com/relaygw/relay/pubsub"
	"github.com/relaygw/relay/session"
)

// metrics are the node's Prometheus collectors, on a registry of its own so
// several nodes can live in one test process.
type metrics struct {
	reg          *prometheus.Registry
	refused      *prometheus.CounterVec
	replayed     prometheus.Counter
	replayErrors prometheus.Counter
	authFailures prometheus.Counter
	// Latencies, in seconds.
	httpDuration  *prometheus.HistogramVec // by route pattern, method, status code
	acceptLatency prometheus.Histogram     // POST /events: request start to 202
	turnDuration  *prometheus.HistogramVec // by outcome (session.Config.OnTurnEnd)
	// session.Config.OnTiming, by session.Timing.
	timings map[session.Timing]prometheus.Histogram
	pubsub  *pubsub.Metrics // published, deliveries, node messages, floods, errors
}

func newMetrics() *metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := promauto.With(reg)
	bi := buildinfo.Read()
	f.NewGaugeVec(prometheus.GaugeOpts{Name: "relay_build_info", Help: "Always 1; the labels name the build: version, commit and Go version."},
		[]string{"version", "commit", "goversion"}).WithLabelValues(bi.Version, bi.Commit, bi.GoVersion).Set(1)
	counter := func(name, help string) prometheus.Counter {
		return f.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	return &metrics{
		reg:          reg,
		refused:      f.NewCounterVec(prometheus.CounterOpts{Name: "relay_events_refused_total", Help: "Events refused, by error code: bad bodies and input, ownership and store refusals (a refused credential or session id is not counted)."}, []string{"code"}),
		replayed:     counter("relay_replayed_events_total", "Events replayed to joining sockets."),
		replayErrors: counter("relay_replay_errors_total", "Joins whose replay read failed (recovered:false)."),
		authFailures: counter("relay_socket_auth_failures_total", "Sockets refused for a missing or invalid token."),
		pubsub:       pubsub.NewMetrics(reg),
		httpDuration: f.NewHistogramVec(prometheus.HistogramOpts{Name: "relay_http_request_duration_seconds",
			Help:    "HTTP request duration by chi route pattern (\"unmatched\" for 404s), method and status code; WebSocket upgrades are not counted.",
			Buckets: prometheus.DefBuckets}, []string{"route", "method", "code"}),
		acceptLatency: f.NewHistogram(prometheus.HistogramOpts{Name: "relay_event_accept_duration_seconds",
			Help:    "Time from an event POST's arrival to its 202 answer (body read, forward hop and the owner's durable accept included).",
			Buckets: prometheus.DefBuckets}),
		timings: map[session.Timing]prometheus.Histogram{
			session.TimingClaim: f.NewHistogram(prometheus.HistogramOpts{Name: "relay_lease_claim_duration_seconds",
				Help:    "One lease claim statement on this node: accepts, renewals and recovery claims (session.TimingClaim).",
				Buckets: latencyBuckets}),
			session.TimingForward: f.NewHistogram(prometheus.HistogramOpts{Name: "relay_forward_duration_seconds",
				Help:    "One forward hop from this node to an owner node, send to answer or error (session.TimingForward).",
				Buckets: latencyBuckets}),
			session.TimingCheckpoint: f.NewHistogram(prometheus.HistogramOpts{Name: "relay_checkpoint_duration_seconds",
				Help:    "A turn's end-of-turn store write on the owner, retries included (session.TimingCheckpoint).",
				Buckets: latencyBuckets}),
			session.TimingFirstDelta: f.NewHistogram(prometheus.HistogramOpts{Name: "relay_turn_first_delta_seconds",
				Help:    "Time from a turn's start on the owner to its first delta published (session.TimingFirstDelta).",
				Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}),
		},
		turnDuration: f.NewHistogramVec(prometheus.HistogramOpts{Name: "relay_turn_duration_seconds",
			Help:    "Turn run time on the owner, from the attempt's start to its written end, by outcome (completed, failed, stopped, interrupted).",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}}, []string{"outcome"}),
	}
}

// latencyBuckets are the buckets of store and hop latencies, in seconds:
// 0.5 ms to 5 s.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// observeTiming records a session latency (session.Config.OnTiming).
func (m *metrics) observeTiming(t session.Timing, d time.Duration) {
	if h := m.timings[t]; h != nil {
		h.Observe(d.Seconds())
	}
}

// observeHTTP is middleware recording relay_http_request_duration_seconds.
// The route label is chi's pattern (bounded), never the raw path.
func (m *metrics) observeHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/socket/websocket" || r.URL.Path == "/socket/longpoll" {
			next.ServeHTTP(w, r) // a socket's lifetime, or a poll's hold, is not a request duration
			return
		}
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		m.httpDuration.WithLabelValues(route, r.Method, strconv.Itoa(status)).Observe(time.Since(start).Seconds())
	})
}

// registerNode adds gauges read from the node's parts at scrape time.
func (m *metrics) registerNode(n *Node) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "relay_sockets", Help: "Open WebSocket connections."},
			func() float64 { return float64(n.endpoint.Stats().SocketsOpen) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "relay_slow_consumer_disconnects_total", Help: "Sockets cut because their outbound queue overflowed."},
			func() float64 { return float64(n.endpoint.Stats().SlowConsumers) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "relay_socket_frames_out_total", Help: "Outbound frames written to sockets (channels.Stats.FramesOut)."},
			func() float64 { return float64(n.endpoint.Stats().FramesOut) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "relay_socket_writes_total", Help: "WebSocket data writes, one per batch of frames (channels.Stats.Writes)."},
			func() float64 { return float64(n.endpoint.Stats().Writes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "relay_socket_writes_parked_total", Help: "WebSocket data writes the kernel did not take whole, finished off the write workers (channels.Stats.WritesParked)."},
			func() float64 { return float64(n.endpoint.Stats().WritesParked) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "relay_bad_frames_total", Help: "Inbound frames that could not be decoded."},
			func() float64 { return float64(n.endpoint.Stats().BadFrames) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "relay_events_accepted_total", Help: "Events accepted into sessions owned by this node (duplicates included), whichever node they came in on."},
			func() float64 { st := n.manager.Stats(); return float64(st.Accepted + st.Duplicates) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "relay_forwards_total", Help: "Forward hops made to owner nodes (session.Stats.Forwards)."},
			func() float64 { return float64(n.manager.Stats().Forwards) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "relay_inbox_write_errors_total", Help: "Inbox writes that failed: the event was refused, or answered outcome_unknown (session.Stats.InboxErrors)."},
			func() float64 { return float64(n.manager.Stats().InboxErrors) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "relay_turn_end_write_retries_total", Help: "Turn-end store writes retried after a transient failure (session.Stats.StoreRetries)."},
			func() float64 { return float64(n.manager.Stats().StoreRetries) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "relay_session_takeovers_total", Help: "Sessions this node took over: thawed at epoch > 1 from a lease another owner held before (it handed the session back, or its lease lapsed) (session.Stats.Takeovers)."},
			func() float64 { return float64(n.manager.Stats().Takeovers) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "relay_session_handbacks_total", Help: "Sessions a drain of this node handed back: lease released for the next owner (session.Stats.HandBacks)."},
			func() float64 { return float64(n.manager.Stats().HandBacks) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "relay_session_stand_downs_total", Help: "Session actors stopped without a clean hand-back: fenced, lease lost, store failure (session.Stats.StandDowns)."},
			func() float64 { return float64(n.manager.Stats().StandDowns) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "relay_fenced_writes_total", Help: "Store writes and log appends refused by the epoch fence (session.Stats.Fenced)."},
			func() float64 { return float64(n.manager.Stats().Fenced) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "relay_turns_resumed_total", Help: "Unfinished turns continued from their journal after a takeover (session.Stats.TurnsResumed)."},
			func() float64 { return float64(n.manager.Stats().TurnsResumed) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "relay_sessions_live", Help: "Session actors running on this node."},
			func() float64 { return float64(len(n.manager.Sessions())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "relay_draining", Help: "1 while the node drains."},
			func() float64 {
				if n.draining.Load() {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "relay_longpoll_sessions", Help: "LongPoll sessions held on this node (each is also one of relay_sockets)."},
			func() float64 { return float64(n.longpoll.Stats().Open) }),
	)
	for _, why := range []string{"no_token", "bad_token", "other_node", "expired", "ended"} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "relay_longpoll_gone_total",
			Help:        "LongPoll polls and posts answered 410 (the client starts a new session), by reason.",
			ConstLabels: prometheus.Labels{"reason": why}},
			func() float64 { return float64(n.longpoll.Stats().Gone[why]) }))
	}
}
