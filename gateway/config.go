package gateway

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/relaygw/relay/muster"
	"github.com/relaygw/relay/session"
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
	ForwardTimeout   time.Duration `name:"forward-timeout" env:"FORWARD_TIMEOUT" default:"5s" help:"How long a node waits for the owner to answer a forwarded event (then 504 forward_timeout)."`
	SessionIdle      time.Duration `name:"session-idle" env:"SESSION_IDLE" default:"60s" help:"Hibernate a session after this long without events."`
	EchoDelay        time.Duration `name:"echo-delay" env:"ECHO_DELAY" default:"150ms" help:"Delay between words streamed by the built-in echo agent."`
	HeartbeatTimeout time.Duration `name:"heartbeat-timeout" env:"HEARTBEAT_TIMEOUT" default:"60s" help:"Close a socket that sends nothing for this long."`
	MaxFrameBytes    int64         `name:"max-frame-bytes" env:"MAX_FRAME_BYTES" default:"65536" help:"Largest WebSocket frame accepted; larger closes the socket with 1009."`
	MaxBodyBytes     int64         `name:"max-body-bytes" env:"MAX_BODY_BYTES" default:"65536" help:"Largest HTTP event body accepted (413 above)."`
	WriteDelay       time.Duration `name:"write-delay" env:"WRITE_DELAY" default:"0s" help:"A socket's writer waits this long after an idle period so a burst of frames goes out in one write (0: write at once)."`
	SocketQueue      int           `name:"socket-queue" env:"SOCKET_QUEUE" default:"1024" help:"Outbound frames queued per socket before it is cut as a slow consumer."`
	ReplayMaxLen     int64         `name:"replay-max-len" env:"REPLAY_MAX_LEN" default:"1000" help:"Events kept per session in the replay log."`
	ReplayTTL        time.Duration `name:"replay-ttl" env:"REPLAY_TTL" default:"24h" help:"Replay log expiry after the last append."`
	MusterHeartbeat  time.Duration `name:"muster-heartbeat" env:"MUSTER_HEARTBEAT" default:"10s" help:"Muster view heartbeat and re-discovery interval."`
	MusterPing       time.Duration `name:"muster-ping" env:"MUSTER_PING" default:"1s" help:"Muster failure-detector heartbeat period."`
	MusterPeerDown   time.Duration `name:"muster-peer-down" env:"MUSTER_PEER_DOWN" default:"5s" help:"Silence after which a peer node is declared down."`

	// Muster tunes the cluster membership scope (timers); zero fields take
	// muster's defaults. Not a command-line setting.
	Muster muster.Config `kong:"-"`

	CensusInterval time.Duration `name:"census-interval" env:"CENSUS_INTERVAL" default:"5s" help:"How often a node broadcasts its viewer counts per session to the other nodes."`

	DrainWindow time.Duration `name:"drain-window" env:"DRAIN_WINDOW" default:"30s" help:"Time a draining node has to hand back sessions and close sockets."`

	IdempotencyTTL time.Duration `name:"idempotency-ttl" env:"IDEMPOTENCY_TTL" default:"24h" help:"How long an accepted idempotency key is remembered (on the database clock)."`
	HistoryWindow  int           `name:"history-window" env:"HISTORY_WINDOW" default:"50" help:"Newest history messages a session's agent is given as context."`

	MaxTurnAttempts int `name:"max-turn-attempts" env:"MAX_TURN_ATTEMPTS" default:"3" help:"Runs a turn gets (first run, resumes and restarts on later owners) before it ends as turn_failed."`

	DoubleTexting string `name:"double-texting" env:"DOUBLE_TEXTING" default:"enqueue" enum:"enqueue,reject,interrupt" help:"What an event without a multitask field does while a turn runs: enqueue, reject (409 session_busy_turn) or interrupt (stop the running turn)."`
}

// DefaultConfig returns the defaults of docs/OWNERSHIP.md "Defaults".
func DefaultConfig() Config {
	return Config{
		Addr: ":4000", LogLevel: "info", Cluster: "relay",
		LeaseTTL: 15 * time.Second, LeaseRenew: 5 * time.Second, SessionIdle: 60 * time.Second, ForwardTimeout: 5 * time.Second,
		EchoDelay: 150 * time.Millisecond, HeartbeatTimeout: 60 * time.Second,
		MaxFrameBytes: 64 << 10, MaxBodyBytes: 64 << 10, SocketQueue: 1024,
		ReplayMaxLen: 1000, ReplayTTL: 24 * time.Hour, DrainWindow: 30 * time.Second,
		MusterHeartbeat: 10 * time.Second, MusterPing: time.Second, MusterPeerDown: 5 * time.Second,
		CensusInterval: 5 * time.Second,
		IdempotencyTTL: 24 * time.Hour, HistoryWindow: 50, MaxTurnAttempts: 3, DoubleTexting: session.MultitaskEnqueue,
	}
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
	switch {
	case c.LeaseTTL <= 0 || c.LeaseRenew <= 0:
		return errors.New("gateway: LEASE_TTL and LEASE_RENEW must be positive")
	case c.LeaseRenew >= c.LeaseTTL-c.renewMargin():
		return fmt.Errorf("gateway: LEASE_RENEW (%v) must be shorter than LEASE_TTL (%v) minus the %v safety margin", c.LeaseRenew, c.LeaseTTL, c.renewMargin())
	case c.SessionIdle <= 0 || c.HeartbeatTimeout <= 0 || c.DrainWindow <= 0 || c.ForwardTimeout <= 0 || c.CensusInterval <= 0:
		return errors.New("gateway: SESSION_IDLE, HEARTBEAT_TIMEOUT, DRAIN_WINDOW, FORWARD_TIMEOUT and CENSUS_INTERVAL must be positive")
	case !session.ValidMultitask(c.DoubleTexting):
		return fmt.Errorf("gateway: DOUBLE_TEXTING %q must be enqueue, reject or interrupt", c.DoubleTexting)
	case c.MaxTurnAttempts < 1:
		return errors.New("gateway: MAX_TURN_ATTEMPTS must be at least 1")
	case c.MaxFrameBytes < 1024 || c.MaxBodyBytes < 256:
		return errors.New("gateway: MAX_FRAME_BYTES must be at least 1024 and MAX_BODY_BYTES at least 256")
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
