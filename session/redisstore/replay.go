// Package redisstore holds the Redis adapter of the session replay log:
// ReplayLog, one Redis Stream per session. It passes the contract suite of
// session/storetest.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/session"
)

// ReplayConfig configures a ReplayLog.
type ReplayConfig struct {
	// Prefix starts every key; a session's stream is <Prefix>session:<id>.
	// Default "" (no prefix).
	Prefix string
	// MaxLen is the number of newest events kept per session (exact
	// trimming). Zero or less means DefaultReplayMaxLen.
	MaxLen int64
	// TTL is how long a session's stream lives after its last append. Zero
	// or less means the streams never expire.
	TTL time.Duration
}

// DefaultReplayConfig returns prefix "relay:", DefaultReplayMaxLen
// events and a one-hour TTL.
func DefaultReplayConfig() ReplayConfig {
	return ReplayConfig{Prefix: "relay:", MaxLen: session.DefaultReplayMaxLen, TTL: time.Hour}
}

// ReplayLog is the cluster session.ReplayLog: one Redis stream per session
// (Redis 7 or newer). An event at (E, S) is the stream entry with id "E-S",
// so entry ids only grow across takeovers and Redis itself refuses an append
// at or below the top, which Append reports as ErrFenced (docs/OWNERSHIP.md
// "Storage"). Entry fields: "t" type, "d" data (JSON), "a" time
// (RFC 3339, nanoseconds), and "p" the Prev position ("E-S") on the first
// event of an epoch that took the session over.
//
// Completeness follows MemoryReplayLog's rule exactly. The floor is kept in
// the stream's own max-deleted-entry-id (XINFO STREAM): each append that
// trims sets it to the newest trimmed id, and the append that creates a
// stream sets it to the fresh floor. It lives and expires with the stream,
// so a stream that expired entirely reads as "no log", complete only for
// the zero position.
//
// Append and Since each take one round trip (a Lua script). Safe for
// concurrent use.
type ReplayLog struct {
	client redis.UniversalClient
	cfg    ReplayConfig
}

var _ session.ReplayLog = (*ReplayLog)(nil)

// NewReplayLog returns a replay log on client.
func NewReplayLog(client redis.UniversalClient, cfg ReplayConfig) *ReplayLog {
	if cfg.MaxLen <= 0 {
		cfg.MaxLen = session.DefaultReplayMaxLen
	}
	return &ReplayLog{client: client, cfg: cfg}
}

// Key returns the stream key of session.
func (l *ReplayLog) Key(session string) string { return l.cfg.Prefix + "session:" + session }

// appendScript: KEYS[1] stream; ARGV[1] id, ARGV[2] maxlen, ARGV[3] ttl in
// ms (0: none), ARGV[4] floor of a fresh stream, ARGV[5..] field/value
// pairs. Reads the ids the append will trim before adding, so the newest of
// them can become the floor. A refused XADD returns its error unchanged and
// nothing is written.
var appendScript = redis.NewScript(`
local key = KEYS[1]
local maxlen = tonumber(ARGV[2])
local len = redis.call('XLEN', key)
local floor = nil
if len == 0 then
  if ARGV[4] ~= '0-0' then floor = ARGV[4] end
elseif len >= maxlen then
  local trimmed = redis.call('XRANGE', key, '-', '+', 'COUNT', len - maxlen + 1)
  floor = trimmed[#trimmed][1]
end
local args = {'XADD', key, 'MAXLEN', ARGV[2], ARGV[1]}
for i = 5, #ARGV do args[#args + 1] = ARGV[i] end
local res = redis.pcall(unpack(args))
if type(res) == 'table' and res.err then return res end
if floor then redis.call('XSETID', key, ARGV[1], 'MAXDELETEDID', floor) end
if tonumber(ARGV[3]) > 0 then redis.call('PEXPIRE', key, ARGV[3]) end
return res
`)

// sinceScript: KEYS[1] stream; ARGV[1] XRANGE start, ARGV[2] count (0: all).
// Returns nil when there is no stream, else {floor, entries}.
var sinceScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local floor = '0-0'
for i = 1, #info, 2 do
  if info[i] == 'max-deleted-entry-id' then floor = info[i + 1] break end
end
local entries
if ARGV[2] == '0' then
  entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+')
else
  entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])
end
return {floor, entries}
`)

// Append implements session.ReplayLog.
func (l *ReplayLog) Append(ctx context.Context, ev agent.Event) error {
	if err := session.CheckAppendPos(ev.Pos()); err != nil {
		return err
	}
	var ttlMS int64
	if l.cfg.TTL > 0 {
		ttlMS = max(l.cfg.TTL.Milliseconds(), 1)
	}
	args := []any{ev.Pos().String(), l.cfg.MaxLen, ttlMS, session.FreshFloor(ev.Pos()).String(),
		"t", ev.Type, "d", []byte(ev.Data), "a", ev.At.Format(time.RFC3339Nano)}
	if ev.Prev != nil {
		args = append(args, "p", ev.Prev.String())
	}
	err := appendScript.Run(ctx, l.client, []string{l.Key(ev.Session)}, args...).Err()
	if err != nil {
		if strings.Contains(err.Error(), "equal or smaller than the target stream top item") {
			return fmt.Errorf("session: append %q at %v: %w", ev.Session, ev.Pos(), session.ErrFenced)
		}
		return fmt.Errorf("session: append %q at %v: %w", ev.Session, ev.Pos(), err)
	}
	return nil
}

// Since implements session.ReplayLog. limit <= 0 means no limit.
func (l *ReplayLog) Since(ctx context.Context, session string, after agent.Position, limit int) ([]agent.Event, bool, error) {
	start := "-"
	if !after.IsZero() {
		start = "(" + after.String()
	}
	res, err := sinceScript.Run(ctx, l.client, []string{l.Key(session)}, start, max(limit, 0)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, after.IsZero(), nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("session: since %q: %w", session, err)
	}
	floor, entries, err := parseSinceReply(res)
	if err != nil {
		return nil, false, fmt.Errorf("session: since %q: %w", session, err)
	}
	events := make([]agent.Event, 0, len(entries))
	for _, e := range entries {
		ev, err := parseEntry(session, e)
		if err != nil {
			return nil, false, fmt.Errorf("session: since %q: %w", session, err)
		}
		events = append(events, ev)
	}
	return events, !after.Less(floor), nil
}

// Top implements session.ReplayLog: the id of the stream's last entry (one
// XREVRANGE).
func (l *ReplayLog) Top(ctx context.Context, session string) (agent.Position, bool, error) {
	entries, err := l.client.XRevRangeN(ctx, l.Key(session), "+", "-", 1).Result()
	if err != nil {
		return agent.Position{}, false, fmt.Errorf("session: top %q: %w", session, err)
	}
	if len(entries) == 0 {
		return agent.Position{}, false, nil
	}
	p, err := parseStreamID(entries[0].ID)
	if err != nil {
		return agent.Position{}, false, fmt.Errorf("session: top %q: %w", session, err)
	}
	return p, true, nil
}

func parseSinceReply(res any) (agent.Position, []any, error) {
	parts, ok := res.([]any)
	if !ok || len(parts) != 2 {
		return agent.Position{}, nil, fmt.Errorf("unexpected reply %T", res)
	}
	id, _ := parts[0].(string)
	floor, err := parseStreamID(id)
	if err != nil {
		return agent.Position{}, nil, err
	}
	entries, ok := parts[1].([]any)
	if !ok {
		return agent.Position{}, nil, fmt.Errorf("unexpected entries %T", parts[1])
	}
	return floor, entries, nil
}

// parseEntry decodes one XRANGE entry: [id, [field, value, ...]].
func parseEntry(session string, raw any) (agent.Event, error) {
	e, ok := raw.([]any)
	if !ok || len(e) != 2 {
		return agent.Event{}, fmt.Errorf("unexpected entry %T", raw)
	}
	id, _ := e[0].(string)
	p, err := parseStreamID(id)
	if err != nil {
		return agent.Event{}, err
	}
	fields, _ := e[1].([]any)
	ev := agent.Event{Session: session, Epoch: p.Epoch, Seq: p.Seq}
	for i := 0; i+1 < len(fields); i += 2 {
		k, _ := fields[i].(string)
		v, _ := fields[i+1].(string)
		switch k {
		case "t":
			ev.Type = v
		case "d":
			if v != "" {
				ev.Data = []byte(v)
			}
		case "a":
			if ev.At, err = time.Parse(time.RFC3339Nano, v); err != nil {
				return agent.Event{}, fmt.Errorf("entry %s: time: %w", id, err)
			}
		case "p":
			prev, err := parseStreamID(v)
			if err != nil {
				return agent.Event{}, fmt.Errorf("entry %s: prev: %w", id, err)
			}
			ev.Prev = &prev
		}
	}
	return ev, nil
}

// parseStreamID parses a stream id "E-S" into a position.
func parseStreamID(id string) (agent.Position, error) {
	e, s, ok := strings.Cut(id, "-")
	if ok {
		epoch, err1 := strconv.ParseInt(e, 10, 64)
		seq, err2 := strconv.ParseInt(s, 10, 64)
		if err1 == nil && err2 == nil {
			return agent.Position{Epoch: epoch, Seq: seq}, nil
		}
	}
	return agent.Position{}, fmt.Errorf("bad stream id %q", id)
}
