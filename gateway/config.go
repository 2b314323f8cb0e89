package gateway

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/session"
	"go.uber.org/zap"
)

// Config is the whole configuration of a gateway node. The struct tags feed
// the command line (cmd/gateway parses flags and environment with kong); every
// field is listed in the README's configuration table. Zero values are
// replaced by the defaults shown in the tags when a Config is built with
// DefaultConfig.
type Config struct {
	Addr     string `name:"addr" env:"ADDR" default:":4000" help:"HTTP listen address."`
	NodeName string `name:"node-name" env:"NODE_NAME" help:"Node name in the cluster (default: hostname)."`
	LogLevel string `name:"log-level" env:"LOG_LEVEL" default:"info" enum:"debug,info,warn,error" help:"Log level."`

	JWTSecret      string   `name:"jwt-secret" env:"JWT_SECRET" help:"HS256 secret for socket and API tokens. Empty: a random one is generated and a development token is printed."`
	APIKeys        []string `name:"api-keys" env:"API_KEYS" help:"Comma-separated API keys for backend event POSTs."`
	AdminToken     string   `name:"admin-token" env:"ADMIN_TOKEN" help:"Bearer token for /admin routes. Empty: admin routes are refused (a random one is printed in development mode)."`
	AllowedOrigins []string `name:"allowed-origins" env:"ALLOWED_ORIGINS" help:"Origin host patterns allowed to open sockets (e.g. example.com,*.example.com). Same-host and no-Origin requests are always allowed."`

	DatabaseURL string `name:"database-url" env:"DATABASE_URL" help:"Postgres URL: lease and session stores. Empty: in-memory."`
	RedisURL    string `name:"redis-url" env:"REDIS_URL" help:"Redis URL: replay log. Empty: in-memory."`
	NATSURL     string `name:"nats-url" env:"NATS_URL" help:"NATS URL: cluster mode (Muster-routed PubSub, forwarding). Empty: single node."`
	Cluster     string `name:"cluster" env:"CLUSTER" default:"relay" help:"Cluster name; prefixes NATS subjects and Redis keys."`

	LeaseTTL         time.Duration `name:"lease-ttl" env:"LEASE_TTL" default:"15s" help:"Session lease time to live."`
	LeaseRenew       time.Duration `name:"lease-renew" env:"LEASE_RENEW" default:"5s" help:"Lease heartbeat interval."`
	ForwardTimeout   time.Duration `name:"forward-timeout" env:"FORWARD_TIMEOUT" default:"5s" help:"Bounds a forwarded event at both ends: how long a node waits for the owner's answer (then 504 forward_timeout), and how long the owner may take to accept it, from when it arrives."`
	SessionIdle      time.Duration `name:"session-idle" env:"SESSION_IDLE" default:"60s" help:"Hibernate a session after this long without events."`
	EchoDelay        time.Duration `name:"echo-delay" env:"ECHO_DELAY" default:"150ms" help:"Delay between words streamed by the built-in echo agent."`
	HeartbeatTimeout time.Duration `name:"heartbeat-timeout" env:"HEARTBEAT_TIMEOUT" default:"60s" help:"Close a socket that sends nothing for this long."`
	MaxFrameBytes    int64         `name:"max-frame-bytes" env:"MAX_FRAME_BYTES" default:"65536" help:"Largest WebSocket frame accepted; larger closes the socket with 1009."`
	MaxBodyBytes     int64         `name:"max-body-bytes" env:"MAX_BODY_BYTES" default:"65536" help:"Largest HTTP event body accepted (413 above)."`
	WriteCoalesce    time.Duration `name:"write-coalesce" env:"WRITE_COALESCE" default:"2ms" help:"Adaptive write coalescing: an idle socket is written at once; one that wrote within this interval waits for the next flush tick so following frames share its write (0: off)."`
	WriteDelay       time.Duration `name:"write-delay" env:"WRITE_DELAY" default:"0s" help:"Deprecated: every socket, idle or not, waits for the next flush tick of this interval (WRITE_COALESCE that also delays idle sockets; 0: WRITE_COALESCE alone)."`
	SocketQueue      int           `name:"socket-queue" env:"SOCKET_QUEUE" default:"1024" help:"Outbound frames queued per socket before it is cut as a slow consumer."`
	SocketMaxLag     time.Duration `name:"socket-max-lag" env:"SOCKET_MAX_LAG" default:"10s" help:"A socket whose oldest queued outbound frame has waited this long is cut as a slow consumer (1013), even if it still reads."`
	SocketUnsent     int           `name:"socket-unsent" env:"SOCKET_UNSENT" default:"16384" help:"Most bytes the kernel holds unsent per socket (TCP_NOTSENT_LOWAT); beyond it frames wait in the socket's queue, where heartbeat replies pass them (0: system default)."`
	LongPollWindow   time.Duration `name:"longpoll-window" env:"LONGPOLL_WINDOW" help:"LongPoll (/socket/longpoll): how long a poll is held waiting for frames (then 204), and how long a session may go without a poll before it is closed. Must be below HEARTBEAT_TIMEOUT and the client's longpollerTimeout (20s). Default (unset or 0): 10s, or half of HEARTBEAT_TIMEOUT when that is shorter."`
	LongPollMaxBody  int64         `name:"longpoll-max-body-bytes" env:"LONGPOLL_MAX_BODY_BYTES" default:"1048576" help:"LongPoll: largest POST body (a batch of up to 100 frames, each within MAX_FRAME_BYTES); larger is refused with 413."`
	LongPollMaxAge   time.Duration `name:"longpoll-max-age" env:"LONGPOLL_MAX_AGE" default:"24h" help:"LongPoll: a session token older than this is answered 410 and its session closed (the client starts a new one)."`
	SocketDrainBatch int           `name:"socket-drain-batch" env:"SOCKET_DRAIN_BATCH" default:"500" help:"Most sockets a drain closes at once; batches are spread over half the time left for closing sockets."`
	ReplayMaxLen     int64         `name:"replay-max-len" env:"REPLAY_MAX_LEN" default:"1000" help:"Events kept per session in the replay log."`
	ReplayTTL        time.Duration `name:"replay-ttl" env:"REPLAY_TTL" default:"24h" help:"Replay log expiry after the last append."`
	ReorderWindow    time.Duration `name:"reorder-window" env:"REORDER_WINDOW" default:"100ms" help:"How long a node holds a session event that arrived ahead of a missing one before handing it to sockets anyway (0: no wait)."`
	MusterHeartbeat  time.Duration `name:"muster-heartbeat" env:"MUSTER_HEARTBEAT" default:"10s" help:"Muster view heartbeat and re-discovery interval."`
	MusterPing       time.Duration `name:"muster-ping" env:"MUSTER_PING" default:"1s" help:"Muster failure-detector heartbeat period."`
	MusterPeerDown   time.Duration `name:"muster-peer-down" env:"MUSTER_PEER_DOWN" default:"5s" help:"Silence after which a peer node is declared down."`
	PubSubRouting    string        `name:"pubsub-routing" env:"PUBSUB_ROUTING" default:"muster" help:"How session events travel between nodes: muster (via the topic's router node), subjects (one NATS subject per topic) or flood (one subject every node receives)."`

	// The AGENT=openai backend (gateway/agent_openai.go).
	OpenAIBaseURL     string        `name:"openai-base-url" env:"OPENAI_BASE_URL" help:"AGENT=openai: the API root, /v1 included (e.g. http://127.0.0.1:8000/v1 for vLLM, http://127.0.0.1:11434/v1 for Ollama)."`
	OpenAIAPIKey      string        `name:"openai-api-key" env:"OPENAI_API_KEY" help:"AGENT=openai: sent as 'Authorization: Bearer <key>' (empty: no header)."`
	OpenAIModel       string        `name:"openai-model" env:"OPENAI_MODEL" help:"AGENT=openai: the model the requests name."`
	OpenAIIdleTimeout time.Duration `name:"openai-idle-timeout" env:"OPENAI_IDLE_TIMEOUT" default:"120s" help:"AGENT=openai: a request that receives nothing (no headers, then no stream bytes) for this long fails the turn."`
	SystemPrompt      string        `name:"agent-system-prompt" env:"AGENT_SYSTEM_PROMPT" help:"AGENT=openai: the system message put before the history (empty: none)."`

	// Muster tunes the cluster membership scope (timers); zero fields take
	// muster's defaults. Not a command-line setting.
	Muster muster.Config `kong:"-"`

	CensusInterval time.Duration `name:"census-interval" env:"CENSUS_INTERVAL" default:"5s" help:"How often a node broadcasts its viewer counts per session to the other nodes."`

	PresencePeriod    time.Duration `name:"presence-broadcast-period" env:"PRESENCE_BROADCAST_PERIOD" default:"1500ms" help:"How often presence changes go out: one presence_diff per session topic to its sockets, one delta to the other nodes."`
	PresenceMaxListed int           `name:"presence-max-listed" env:"PRESENCE_MAX_LISTED" default:"1000" help:"Most presences a session topic lists; above it sockets get presence_state {} and presence_count {\"count\":N} (0: no limit)."`

	ReadyInterval time.Duration `name:"ready-interval" env:"READY_INTERVAL" default:"1s" help:"How often the readiness checks (NATS, lease store, replay store, Muster) run; /readyz turns 503 after 2 failing rounds and back after 3 good ones."`

	DrainWindow time.Duration `name:"drain-window" env:"DRAIN_WINDOW" default:"30s" help:"Time a draining node has to hand back sessions and close sockets."`

	IdempotencyTTL time.Duration `name:"idempotency-ttl" env:"IDEMPOTENCY_TTL" default:"24h" help:"How long an accepted idempotency key is remembered (on the database clock)."`
	HistoryWindow  int           `name:"history-window" env:"HISTORY_WINDOW" default:"50" help:"Newest history messages a session's agent is given as context."`

	MaxTurnAttempts int `name:"max-turn-attempts" env:"MAX_TURN_ATTEMPTS" default:"3" help:"Runs a turn gets (first run, resumes and restarts on later owners) before it ends as turn_failed."`

	// Agent backends (README "Bring your own agent"; agent.go).
	Agent              string        `name:"agent" env:"AGENT" default:"echo" help:"Agent backend running every session's turns: echo (built in), http (AGENT_URL, docs/AGENT_PROTOCOL.md) or openai (an OpenAI-compatible chat completions server: OPENAI_BASE_URL, OPENAI_MODEL)."`
	AgentRoutes        []string      `name:"agent-routes" env:"AGENT_ROUTES" help:"Comma-separated prefix=backend pairs: a session whose id starts with prefix runs on backend (a backend name as for AGENT, or an http(s) URL of an HTTP agent); the longest prefix wins, AGENT serves the rest."`
	AgentURL           string        `name:"agent-url" env:"AGENT_URL" help:"URL the http backend POSTs each turn to."`
	AgentSecret        string        `name:"agent-secret" env:"AGENT_SECRET" help:"Shared secret the http backend signs its requests with (HMAC-SHA256, Relay-Signature header)."`
	AgentTurnTimeout   time.Duration `name:"agent-turn-timeout" env:"AGENT_TURN_TIMEOUT" default:"5m" help:"Longest turn run of the http backend, request to end of stream; then the turn fails."`
	AgentRetryBudget   time.Duration `name:"agent-retry-budget" env:"AGENT_RETRY_BUDGET" default:"10s" help:"Time the http backend retries (with backoff) a request that failed before the agent's first event."`
	AgentMaxEventBytes int           `name:"agent-max-event-bytes" env:"AGENT_MAX_EVENT_BYTES" default:"65536" help:"Largest event in an agent's response stream; larger fails the turn."`
	AgentMaxReplyBytes int           `name:"agent-max-reply-bytes" env:"AGENT_MAX_REPLY_BYTES" default:"1048576" help:"Largest whole reply (all event data of a turn); larger fails the turn."`

	DoubleTexting string `name:"double-texting" env:"DOUBLE_TEXTING" default:"enqueue" enum:"enqueue,reject,interrupt" help:"What an event without a multitask field does while a turn runs, in a session whose first event named none: enqueue, reject (409 session_busy_turn) or interrupt (stop the running turn)."`
}

// DefaultConfig returns the defaults of docs/OWNERSHIP.md "Defaults".
func DefaultConfig() Config {
	return Config{
		Addr: ":4000", LogLevel: "info", Cluster: "relay",
		LeaseTTL: 15 * time.Second, LeaseRenew: 5 * time.Second, SessionIdle: 60 * time.Second, ForwardTimeout: 5 * time.Second,
		EchoDelay: 150 * time.Millisecond, HeartbeatTimeout: 60 * time.Second, OpenAIIdleTimeout: 120 * time.Second,
		MaxFrameBytes: 64 << 10, MaxBodyBytes: 64 << 10, SocketQueue: 1024,
		SocketMaxLag: 10 * time.Second, SocketUnsent: 16 << 10, SocketDrainBatch: 500,
		LongPollMaxBody: 1 << 20, LongPollMaxAge: 24 * time.Hour,
		ReplayMaxLen: 1000, ReplayTTL: 24 * time.Hour, ReorderWindow: 100 * time.Millisecond, DrainWindow: 30 * time.Second,
		ReadyInterval:   time.Second,
		MusterHeartbeat: 10 * time.Second, MusterPing: time.Second, MusterPeerDown: 5 * time.Second,
		PubSubRouting:  "muster",
		CensusInterval: 5 * time.Second, PresencePeriod: 1500 * time.Millisecond, PresenceMaxListed: 1000,
		IdempotencyTTL: 24 * time.Hour, HistoryWindow: 50, MaxTurnAttempts: 3,
		Agent: "echo", AgentTurnTimeout: 5 * time.Minute, AgentRetryBudget: 10 * time.Second,
		AgentMaxEventBytes: 64 << 10, AgentMaxReplyBytes: 1 << 20,
		DoubleTexting: session.MultitaskEnqueue,
	}
}

// defaultLongPollWindow is LONGPOLL_WINDOW when it is not set and
// HEARTBEAT_TIMEOUT is at least twice as long.
const defaultLongPollWindow = 10 * time.Second

// EffectiveLongPollWindow is LONGPOLL_WINDOW as the node uses it: the setting, or
// when it is not set (0) min(10s, HEARTBEAT_TIMEOUT/2), so that a held
// poll always ends (and the client polls again) before the socket's idle
// timeout.
func (c Config) EffectiveLongPollWindow() time.Duration {
	if c.LongPollWindow != 0 {
		return c.LongPollWindow
	}
	return min(defaultLongPollWindow, c.HeartbeatTimeout/2)
}

// renewMargin is the safety margin the lease renewer keeps before the local
// deadline: 2 s, or a fifth of the TTL for short test TTLs.
func (c Config) renewMargin() time.Duration { return min(2*time.Second, c.LeaseTTL/5) }

// Validate reports a configuration that cannot work or cannot keep the
// node's guarantees; the error names the settings and the fix. The valid
// store combinations (README "Configuration"):
//
//   - embedded default: none of DATABASE_URL, REDIS_URL, NATS_URL;
//   - durable single node: DATABASE_URL and/or REDIS_URL, no NATS_URL;
//   - cluster: NATS_URL with both DATABASE_URL and REDIS_URL.
//
// A cluster without DATABASE_URL would decide ownership on each node's
// in-memory leases, so every node would own every session (two owners, two
// histories); one without REDIS_URL would replay a join from the serving
// node's own in-memory log, which lacks the events other owners wrote.
func (c Config) Validate() error {
	if err := c.validateStores(); err != nil {
		return err
	}
	if err := c.validatePlaceholders(); err != nil {
		return err
	}
	if _, err := c.buildAgent(zap.NewNop()); err != nil {
		return err
	}
	if err := c.validateRouting(); err != nil {
		return err
	}
	switch {
	case c.LeaseTTL <= 0 || c.LeaseRenew <= 0:
		return errors.New("gateway: LEASE_TTL and LEASE_RENEW must be positive")
	case c.LeaseRenew >= c.LeaseTTL-c.renewMargin():
		return fmt.Errorf("gateway: LEASE_RENEW (%v) must be shorter than LEASE_TTL (%v) minus the %v safety margin", c.LeaseRenew, c.LeaseTTL, c.renewMargin())
	case c.SessionIdle <= 0 || c.HeartbeatTimeout <= 0 || c.DrainWindow <= 0 || c.ForwardTimeout <= 0 || c.CensusInterval <= 0 || c.ReadyInterval <= 0:
		return errors.New("gateway: SESSION_IDLE, HEARTBEAT_TIMEOUT, DRAIN_WINDOW, FORWARD_TIMEOUT, CENSUS_INTERVAL and READY_INTERVAL must be positive")
	case c.PresencePeriod <= 0 || c.PresenceMaxListed < 0:
		return errors.New("gateway: PRESENCE_BROADCAST_PERIOD must be positive and PRESENCE_MAX_LISTED at least 0")
	case c.ReorderWindow < 0 || c.ReorderWindow > 10*time.Second:
		return errors.New("gateway: REORDER_WINDOW must be between 0 and 10s")
	case !session.ValidMultitask(c.DoubleTexting):
		return fmt.Errorf("gateway: DOUBLE_TEXTING %q must be enqueue, reject or interrupt", c.DoubleTexting)
	case c.MaxTurnAttempts < 1:
		return errors.New("gateway: MAX_TURN_ATTEMPTS must be at least 1")
	case c.MaxFrameBytes < 1024 || c.MaxBodyBytes < 256:
		return errors.New("gateway: MAX_FRAME_BYTES must be at least 1024 and MAX_BODY_BYTES at least 256")
	case c.SocketMaxLag <= 0 || c.SocketUnsent < 0 || c.SocketDrainBatch < 1:
		return errors.New("gateway: SOCKET_MAX_LAG must be positive, SOCKET_UNSENT at least 0 and SOCKET_DRAIN_BATCH at least 1")
	case c.LongPollWindow < 0:
		return fmt.Errorf("gateway: LONGPOLL_WINDOW (%v) must be positive (or unset: min(%v, HEARTBEAT_TIMEOUT/2))", c.LongPollWindow, defaultLongPollWindow)
	case c.LongPollWindow >= c.HeartbeatTimeout:
		return fmt.Errorf("gateway: LONGPOLL_WINDOW (%v) must be below HEARTBEAT_TIMEOUT (%v): a held poll must end, and the client poll again, before the socket's idle timeout; lower LONGPOLL_WINDOW, or unset it to default to min(%v, HEARTBEAT_TIMEOUT/2)", c.LongPollWindow, c.HeartbeatTimeout, defaultLongPollWindow)
	case c.EffectiveLongPollWindow() <= 0:
		return fmt.Errorf("gateway: HEARTBEAT_TIMEOUT (%v) is too short to derive LONGPOLL_WINDOW from (half of it); raise it or set LONGPOLL_WINDOW", c.HeartbeatTimeout)
	case c.LongPollMaxBody < 256 || c.LongPollMaxAge <= 0:
		return errors.New("gateway: LONGPOLL_MAX_BODY_BYTES must be at least 256 and LONGPOLL_MAX_AGE positive")
	case c.SocketQueue < 1 || c.ReplayMaxLen < 1:
		return errors.New("gateway: SOCKET_QUEUE and REPLAY_MAX_LEN must be at least 1")
	case int64(c.SocketQueue) < c.ReplayMaxLen:
		return fmt.Errorf("gateway: SOCKET_QUEUE (%d) is below REPLAY_MAX_LEN (%d): a socket must be able to queue as many frames as a rejoin may replay; raise SOCKET_QUEUE or lower REPLAY_MAX_LEN", c.SocketQueue, c.ReplayMaxLen)
	}
	return nil
}

// validateStores refuses the store combinations that break single-writer
// ownership or the replay seam (see Validate).
func (c Config) validateStores() error {
	if c.NATSURL == "" {
		return nil
	}
	var missing []string
	if c.DatabaseURL == "" {
		missing = append(missing, "DATABASE_URL (without it each node decides ownership on its own in-memory leases, so two nodes can own one session)")
	}
	if c.RedisURL == "" {
		missing = append(missing, "REDIS_URL (without it a join replays from the serving node's own in-memory log, which lacks other owners' events)")
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("gateway: NATS_URL (cluster mode) needs %s; set them, or unset NATS_URL to run a single node", strings.Join(missing, " and "))
}
