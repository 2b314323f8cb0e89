// Command gateway runs one relay node: the Phoenix socket endpoint, the event
// API and the admin routes. Configuration comes from flags and environment
// variables (see the README's configuration table or `gateway --help`).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/relaygw/relay/gateway"
	"github.com/relaygw/relay/internal/buildinfo"
	"github.com/relaygw/relay/internal/redislog"
	"github.com/relaygw/relay/internal/telemetry"
	"go.opentelemetry.io/otel"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// cli is the command line: `gateway [flags]` runs a node (serve is the
// default command), `gateway token` mints a JWT, `gateway secret` prints a
// random secret, `gateway drain` starts a running node's drain, `gateway
// migrate up|down|status` manages the database schema, `gateway
// --version` prints the build.
type cli struct {
	Version kong.VersionFlag `help:"Print the version, commit and Go version, and exit."`
	Serve   serveCmd         `cmd:"" default:"withargs" help:"Run a gateway node (the default command). Tracing is set by the standard OTEL_* variables (README \"Tracing\"); off unless OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER=otlp is set."`
	Token   tokenCmd         `cmd:"" help:"Mint a JWT for sockets and the API, signed with JWT_SECRET."`
	Secret  secretCmd        `cmd:"" help:"Print a random hex secret (for JWT_SECRET, API_KEYS or ADMIN_TOKEN)."`
	Drain   drainCmd         `cmd:"" help:"Start a node's drain through its admin API (POST /admin/drain); --wait waits until it is empty (the Kubernetes preStop hook)."`
	Migrate migrateCmd       `cmd:"" help:"Apply, roll back or list the Postgres migrations of DATABASE_URL's schema (nodes apply pending ones at start)."`
}

type serveCmd struct {
	gateway.Config `embed:""`
}

func (s *serveCmd) Run() error { return run(s.Config) }

// Validate checks the settings as kong parses them, before anything
// starts. Its error is a configError, which main prints as it reads,
// without kong's "error: serve:" framing.
func (s *serveCmd) Validate() error {
	if err := s.Config.Validate(); err != nil {
		return configError{err}
	}
	if err := telemetry.Check(); err != nil { // the OTEL_* settings: refused like the others
		return configError{err}
	}
	return nil
}

// configError is a refused configuration (gateway.Config.Validate).
type configError struct{ err error }

func (e configError) Error() string { return e.err.Error() }
func (e configError) Unwrap() error { return e.err }

func main() {
	// A server whose log reader died (the terminal's Ctrl-C also ends a
	// `| tee`) keeps running and draining: writes to the broken pipe then
	// fail and the lines are lost, instead of Go's default of dying of
	// SIGPIPE on a write to stdout or stderr.
	signal.Ignore(syscall.SIGPIPE)
	c := cli{Serve: serveCmd{Config: gateway.DefaultConfig()}}
	parser := newParser(&c)
	kctx, err := parser.Parse(os.Args[1:])
	var cfgErr configError
	var parseErr *kong.ParseError
	switch {
	case errors.As(err, &cfgErr) && errors.As(err, &parseErr):
		fmt.Fprintln(os.Stderr, errorLine(cfgErr.err))
		os.Exit(exitRefused)
	case err != nil:
		// Usage errors and values kong could not decode, from a flag or
		// the environment: kong exits 80 for the flag but 1 for the same
		// value from the environment (HEARTBEAT_TIMEOUT=abc, a ParseError
		// without an exit code). Either is a refused setting: 80.
		parser.Errorf("%s", oneLine(err.Error()))
		parser.Exit(exitRefused)
	}
	if err := kctx.Run(); err != nil {
		fmt.Fprintln(os.Stderr, errorLine(err))
		os.Exit(1)
	}
}

// exitRefused is the exit code of a refused setting (kong's usage error
// code): the node did not start.
const exitRefused = 80

// newParser is the command line's parser into c (flags and environment).
func newParser(c *cli) *kong.Kong {
	return kong.Must(c, kong.Name("gateway"), kong.Description("Relay: a realtime gateway for conversational agents."),
		kong.Vars{"version": buildinfo.Read().String()}, kong.BindTo(os.Stdout, (*io.Writer)(nil)))
}

// oneLine folds every run of whitespace in msg (pgx's connect errors put
// each address tried on a line of its own, "\n\t") into one space, so a
// failed start is one line on stderr.
func oneLine(msg string) string { return strings.Join(strings.Fields(msg), " ") }

// errorLine is the line a failed command prints: the error, prefixed with
// the program's name once. Errors of the gateway package already start
// with "gateway: ", which is the program's name too.
func errorLine(err error) string {
	msg := oneLine(err.Error())
	if strings.HasPrefix(msg, "gateway: ") {
		return msg
	}
	return "gateway: " + msg
}

func run(cfg gateway.Config) error {
	log, err := newLogger(cfg.LogLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	bi := buildinfo.Read()
	log.Info("starting", zap.String("version", bi.Version), zap.String("commit", bi.Commit),
		zap.Bool("modified", bi.Modified), zap.String("go", bi.GoVersion))

	dev := cfg.JWTSecret == ""
	if dev {
		cfg.JWTSecret = randomHex(32)
		if cfg.AdminToken == "" {
			cfg.AdminToken = randomHex(16)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	tracing, err := telemetry.Setup(ctx, bi.Version)
	if err != nil {
		return err
	}
	opts := gateway.Options{Logger: log}
	redislog.Install(log.Named("redis")) // go-redis's own lines as JSON, not plain stderr lines
	if tracing.Exporter != telemetry.ExporterNone {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing: export failed", zap.Error(err)) }))
		opts.TracerProvider = tracing.Provider
		log.Info("tracing on", zap.String("exporter", tracing.Exporter), zap.String("endpoint", tracing.Endpoint))
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tracing.Shutdown(sctx); err != nil {
				log.Warn("tracing: flush at exit", zap.Error(err))
			}
		}()
	}

	node, err := gateway.New(ctx, cfg, opts)
	if err != nil {
		return err
	}
	defer node.Close()

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Addr, err)
	}
	// No ReadTimeout: WebSockets live long (event bodies have their own
	// deadline). IdleTimeout closes idle keep-alive connections, which
	// otherwise held a descriptor and a goroutine each forever.
	srv := &http.Server{Handler: node.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	log.Info("listening", zap.String("addr", ln.Addr().String()), zap.String("mode", node.Mode()), zap.String("owner", node.Owner()))
	if dev {
		tok, err := node.Auth().Mint("dev", []string{"*"}, 30*24*time.Hour)
		if err != nil {
			return err
		}
		open := fmt.Sprintf("http://%s/#token=%s&session=demo-1", browseAddr(ln.Addr()), tok)
		log.Warn("development mode: JWT_SECRET not set, using a random secret",
			zap.String("open", open), zap.String("api_token", tok), zap.String("admin_token", cfg.AdminToken))
		// Straight to stderr as well: the node is unusable without these,
		// whatever LOG_LEVEL filters out.
		fmt.Fprintf(os.Stderr, "development mode (JWT_SECRET not set):\n  open:        %s\n  api token:   %s\n  admin token: %s\n",
			open, tok, cfg.AdminToken)
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	stop()
	log.Info("shutting down: draining", zap.Duration("window", cfg.DrainWindow))
	dctx, cancel := context.WithTimeout(context.Background(), cfg.DrainWindow)
	defer cancel()
	if err := node.Drain(dctx); err != nil {
		log.Warn("drain incomplete", zap.Error(err))
	}
	if err := srv.Shutdown(dctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Warn("http shutdown", zap.Error(err))
	}
	log.Info("stopped")
	return nil
}

func newLogger(level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.Sampling = nil
	zc.EncoderConfig = loggerEncoderConfig()
	return zc.Build()
}

// loggerEncoderConfig is the node's JSON log line: zap's production fields,
// "ts" in ISO 8601, and durations with their unit ("1.5s", "250ms"), not
// bare seconds.
func loggerEncoderConfig() zapcore.EncoderConfig {
	ec := zap.NewProductionEncoderConfig()
	ec.TimeKey = "ts"
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	ec.EncodeDuration = zapcore.StringDurationEncoder
	return ec
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// browseAddr turns a listen address into one a browser can open.
func browseAddr(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}
