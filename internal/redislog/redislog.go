// Package redislog routes go-redis's own log lines (a failed dial, a pool
// reconnect) into the node's zap logger, so stderr holds only JSON lines.
// go-redis writes them with the standard log package to stderr by default,
// about twice a second while Redis is unreachable.
package redislog

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Message is the zap message of every go-redis line; the line itself is the
// "detail" field.
const Message = "redis client"

// Interval is the sampling window: at most one go-redis line is logged per
// Interval, so an outage does not flood the log.
const Interval = 10 * time.Second

// Logger adapts a zap logger to go-redis's logging interface
// (redis.SetLogger). Each line is a warn entry, sampled to one per Interval.
type Logger struct {
	log *zap.Logger
}

// New returns a Logger writing to log, sampled to one entry per Interval.
func New(log *zap.Logger) *Logger { return sampled(log, Interval) }

// sampled returns a Logger writing at most one entry per tick to log.
func sampled(log *zap.Logger, tick time.Duration) *Logger {
	return &Logger{log: log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, tick, 1, 0)
	}))}
}

// Printf logs one go-redis line at warn.
func (l *Logger) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn(Message, zap.String("detail", fmt.Sprintf(format, v...)))
}

// Install makes go-redis log through log for the whole process (go-redis's
// logger is global): call it once, where the process builds its logger.
func Install(log *zap.Logger) {
	redis.SetLogger(New(log))
}
