package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/session"
)

// SessionStore is the cluster session.SessionStore, on the tables of
// migrations/00003 to 00006 (session_state, session_inbox, session_history,
// session_keys). Every write is ONE statement whose first step is the fence
// (an UPDATE of the session_state row that lands only if the stored epoch
// is not ahead of the writer's); the other steps read the fence's row, so a
// fenced write changes nothing and comes back as ErrFenced. Key ages are
// measured on the database's clock. Safe for concurrent use.
type SessionStore struct {
	pool *pgxpool.Pool
}

var _ session.SessionStore = (*SessionStore)(nil)

// NewSessionStore returns a session store on pool. The pool's
// connections must resolve the session_* tables (search_path).
func NewSessionStore(pool *pgxpool.Pool) *SessionStore {
	return &SessionStore{pool: pool}
}

// thawFenceSQL: $1 key, $2 epoch. No row back: fenced.
const thawFenceSQL = `
WITH old AS (SELECT epoch FROM session_state WHERE key = $1)
INSERT INTO session_state AS s (key, epoch, seq, history_n, updated_at)
VALUES ($1, $2, 0, 0, now())
ON CONFLICT (key) DO UPDATE SET epoch = EXCLUDED.epoch, updated_at = EXCLUDED.updated_at
WHERE s.epoch <= EXCLUDED.epoch
RETURNING s.seq, COALESCE((SELECT epoch FROM old), 0), s.double_texting`

const inboxSQL = `SELECT epoch, seq, idem_key, body_hash, input_type, input_data, attempts FROM session_inbox WHERE key = $1 ORDER BY epoch, seq`

// historySQL: $1 key, $2 before (exclusive), $3 limit; newest first.
const historySQL = `
SELECT n, turn_epoch, turn_seq, role, content, stopped FROM session_history
WHERE key = $1 AND n < $2 ORDER BY n DESC LIMIT $3`

// keysSQL: $1 key, $2 retention, $3 limit; newest first.
const keysSQL = `
SELECT idem_key, epoch, seq, body_hash, (extract(epoch FROM now() - accepted_at) * 1e6)::bigint
FROM session_keys WHERE key = $1 AND accepted_at > now() - $2::interval
ORDER BY accepted_at DESC LIMIT $3`

// acceptSQL: $1 key, $2 writer epoch, $3 input epoch, $4 input seq,
// $5 idempotency key, $6 body hash, $7 input type, $8 input data (JSON
// bytes, stored as they are), $9 key retention, $10 the double-texting
// mode to set if the session has none (an empty one sets nothing).
const acceptSQL = `
WITH f AS (
    UPDATE session_state SET epoch = $2, seq = GREATEST(seq, $4::bigint), updated_at = now(),
        double_texting = CASE WHEN double_texting = '' THEN $10::text ELSE double_texting END
    WHERE key = $1 AND epoch <= $2
    RETURNING key),
i AS (
    INSERT INTO session_inbox (key, epoch, seq, idem_key, body_hash, input_type, input_data)
    SELECT key, $3::bigint, $4::bigint, $5::text, $6::bytea, $7::bytea, $8::bytea FROM f
    ON CONFLICT (key, epoch, seq) DO UPDATE SET idem_key = EXCLUDED.idem_key,
        body_hash = EXCLUDED.body_hash, input_type = EXCLUDED.input_type, input_data = EXCLUDED.input_data),
k AS (
    INSERT INTO session_keys (key, idem_key, epoch, seq, body_hash, accepted_at)
    SELECT key, $5::text, $3::bigint, $4::bigint, $6::bytea, now() FROM f WHERE $5::text <> ''
    ON CONFLICT (key, idem_key) DO UPDATE SET epoch = EXCLUDED.epoch, seq = EXCLUDED.seq,
        body_hash = EXCLUDED.body_hash, accepted_at = EXCLUDED.accepted_at),
p AS (
    DELETE FROM session_keys d USING f
    WHERE d.key = f.key AND d.accepted_at < now() - $9::interval AND d.idem_key <> $5::text)
SELECT count(*) FROM f`

// completeSQL: $1 key, $2 writer epoch, $3 seq, $4 input epoch, $5 input
// seq, $6 roles, $7 contents, $8 stopped flags. The history numbers follow history_n. The
// messages are appended only while the input is in the inbox, so a
// repeated write (after an unknown outcome) appends nothing twice.
const completeSQL = `
WITH p AS (
    SELECT EXISTS (SELECT 1 FROM session_inbox WHERE key = $1 AND epoch = $4 AND seq = $5) AS live),
f AS (
    UPDATE session_state s SET epoch = $2, seq = GREATEST(s.seq, $3::bigint),
        history_n = s.history_n + CASE WHEN p.live THEN cardinality($6::text[]) ELSE 0 END,
        updated_at = now()
    FROM p WHERE s.key = $1 AND s.epoch <= $2
    RETURNING s.key, s.history_n, p.live),
d AS (
    DELETE FROM session_inbox b USING f WHERE b.key = f.key AND b.epoch = $4 AND b.seq = $5),
h AS (
    INSERT INTO session_history (key, n, turn_epoch, turn_seq, role, content, stopped)
    SELECT f.key, f.history_n - cardinality($6::text[]) + m.ord, $4, $5, m.role, m.content, m.stopped
    FROM f, unnest($6::text[], $7::bytea[], $8::bool[]) WITH ORDINALITY AS m(role, content, stopped, ord)
    WHERE f.live)
SELECT count(*) FROM f`

// startTurnSQL: $1 key, $2 writer epoch, $3 input epoch, $4 input seq,
// $5 attempt.
const startTurnSQL = `
WITH f AS (
    UPDATE session_state SET epoch = $2, updated_at = now()
    WHERE key = $1 AND epoch <= $2
    RETURNING key),
a AS (
    UPDATE session_inbox b SET attempts = GREATEST(b.attempts, $5::int)
    FROM f WHERE b.key = f.key AND b.epoch = $3 AND b.seq = $4)
SELECT count(*) FROM f`

const stateSQL = `SELECT epoch, seq, history_n, double_texting FROM session_state WHERE key = $1`

// Thaw implements session.SessionStore: the fence statement, then one batch of
// reads (inbox, history window, keys). The reads follow the fence's
// commit, so they see every write that landed before it, and every later
// write of an older epoch is fenced.
func (s *SessionStore) Thaw(ctx context.Context, key string, epoch int64, q session.ThawQuery) (session.Thawed, error) {
	var th session.Thawed
	err := s.pool.QueryRow(ctx, thawFenceSQL, key, epoch).Scan(&th.Seq, &th.FromEpoch, &th.DoubleTexting)
	if errors.Is(err, pgx.ErrNoRows) {
		return session.Thawed{}, fmt.Errorf("session: thaw %q epoch %d: %w", key, epoch, session.ErrFenced)
	}
	if err != nil {
		return session.Thawed{}, fmt.Errorf("session: thaw %q: %w", key, err)
	}
	b := &pgx.Batch{}
	b.Queue(inboxSQL, key)
	b.Queue(historySQL, key, int64(math.MaxInt64), max(q.HistoryWindow, 0))
	b.Queue(keysSQL, key, q.KeyTTL, max(q.MaxKeys, 0))
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if th.Inbox, err = scanInbox(br.Query()); err != nil {
		return session.Thawed{}, fmt.Errorf("session: thaw %q: inbox: %w", key, err)
	}
	if th.History, err = scanHistory(br.Query()); err != nil {
		return session.Thawed{}, fmt.Errorf("session: thaw %q: history: %w", key, err)
	}
	rows, err := br.Query()
	if err == nil {
		th.Keys, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (session.KeyRecord, error) {
			var k session.KeyRecord
			var hash []byte
			var ageMicros int64
			err := r.Scan(&k.Key, &k.Epoch, &k.Seq, &hash, &ageMicros)
			copy(k.BodyHash[:], hash)
			k.Age = time.Duration(ageMicros) * time.Microsecond
			return k, err
		})
	}
	if err != nil {
		return session.Thawed{}, fmt.Errorf("session: thaw %q: keys: %w", key, err)
	}
	for i, j := 0, len(th.Keys)-1; i < j; i, j = i+1, j-1 {
		th.Keys[i], th.Keys[j] = th.Keys[j], th.Keys[i]
	}
	return th, nil
}

// Accept implements session.SessionStore (one statement).
func (s *SessionStore) Accept(ctx context.Context, key string, epoch int64, in session.InboxEntry, keyTTL time.Duration) error {
	var hash []byte
	if in.BodyHash != ([32]byte{}) {
		hash = in.BodyHash[:]
	} else {
		hash = []byte{}
	}
	data := []byte(in.Input.Data)
	if data == nil {
		data = []byte{}
	}
	var n int64
	err := s.pool.QueryRow(ctx, acceptSQL, key, epoch, in.Epoch, in.Seq, in.Input.IdempotencyKey, hash,
		[]byte(in.Input.Type), data, keyTTL, in.DoubleTexting).Scan(&n)
	if err != nil {
		return fmt.Errorf("session: accept %q at %d-%d: %w", key, in.Epoch, in.Seq, writeErr(err))
	}
	if n == 0 {
		return fmt.Errorf("session: accept %q epoch %d: %w", key, epoch, session.ErrFenced)
	}
	return nil
}

// CompleteTurn implements session.SessionStore (one statement; its cost depends on
// the turn's messages only, not on the history's length).
func (s *SessionStore) CompleteTurn(ctx context.Context, key string, epoch int64, t session.TurnRecord) error {
	roles := make([]string, len(t.Messages))
	contents := make([][]byte, len(t.Messages))
	stopped := make([]bool, len(t.Messages))
	for i, m := range t.Messages {
		roles[i], contents[i], stopped[i] = m.Role, []byte(m.Content), m.Stopped
	}
	var n int64
	err := s.pool.QueryRow(ctx, completeSQL, key, epoch, t.Seq, t.Input.Epoch, t.Input.Seq, roles, contents, stopped).Scan(&n)
	if err != nil {
		return fmt.Errorf("session: complete turn %q at %v: %w", key, t.Input, writeErr(err))
	}
	if n == 0 {
		return fmt.Errorf("session: complete turn %q epoch %d: %w", key, epoch, session.ErrFenced)
	}
	return nil
}

// StartTurn implements session.SessionStore (one statement).
func (s *SessionStore) StartTurn(ctx context.Context, key string, epoch int64, input agent.Position, attempt int) error {
	var n int64
	err := s.pool.QueryRow(ctx, startTurnSQL, key, epoch, input.Epoch, input.Seq, attempt).Scan(&n)
	if err != nil {
		return fmt.Errorf("session: start turn %q at %v: %w", key, input, writeErr(err))
	}
	if n == 0 {
		return fmt.Errorf("session: start turn %q epoch %d: %w", key, epoch, session.ErrFenced)
	}
	return nil
}

// lookupKeySQL: $1 key, $2 idempotency key, $3 retention.
const lookupKeySQL = `
SELECT epoch, seq, body_hash, (extract(epoch FROM now() - accepted_at) * 1e6)::bigint
FROM session_keys WHERE key = $1 AND idem_key = $2 AND accepted_at > now() - $3::interval`

// LookupKey implements session.SessionStore (one indexed read).
func (s *SessionStore) LookupKey(ctx context.Context, key, idemKey string, keyTTL time.Duration) (session.KeyRecord, bool, error) {
	rec := session.KeyRecord{Key: idemKey}
	var hash []byte
	var ageMicros int64
	err := s.pool.QueryRow(ctx, lookupKeySQL, key, idemKey, keyTTL).Scan(&rec.Epoch, &rec.Seq, &hash, &ageMicros)
	if errors.Is(err, pgx.ErrNoRows) {
		return session.KeyRecord{}, false, nil
	}
	if err != nil {
		return session.KeyRecord{}, false, fmt.Errorf("session: look up key of %q: %w", key, err)
	}
	copy(rec.BodyHash[:], hash)
	rec.Age = time.Duration(ageMicros) * time.Microsecond
	return rec, true, nil
}

// Unfinished implements session.SessionStore.
func (s *SessionStore) Unfinished(ctx context.Context, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT key FROM session_inbox LIMIT $1`, max(limit, 0))
	if err == nil {
		var keys []string
		keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err == nil {
			return keys, nil
		}
	}
	return nil, fmt.Errorf("session: unfinished sessions: %w", err)
}

// Read implements session.SessionStore (one batch of reads).
func (s *SessionStore) Read(ctx context.Context, key string, q session.HistoryQuery) (session.StoredSession, bool, error) {
	before := q.Before
	if before <= 0 {
		before = math.MaxInt64
	}
	b := &pgx.Batch{}
	b.Queue(stateSQL, key)
	b.Queue(inboxSQL, key)
	b.Queue(historySQL, key, before, max(q.Limit, 0))
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	var st session.StoredSession
	err := br.QueryRow().Scan(&st.Epoch, &st.Seq, &st.Total, &st.DoubleTexting)
	if errors.Is(err, pgx.ErrNoRows) {
		return session.StoredSession{}, false, nil
	}
	if err != nil {
		return session.StoredSession{}, false, fmt.Errorf("session: read %q: %w", key, err)
	}
	if st.Inbox, err = scanInbox(br.Query()); err != nil {
		return session.StoredSession{}, false, fmt.Errorf("session: read %q: inbox: %w", key, err)
	}
	if st.History, err = scanHistory(br.Query()); err != nil {
		return session.StoredSession{}, false, fmt.Errorf("session: read %q: history: %w", key, err)
	}
	return st, true, nil
}

// writeErr marks a failed write statement whose outcome is unknown: one
// that may have reached the server (no connection failure, and
// pgconn.SafeToRetry is false) and got no answer from it (a
// *pgconn.PgError is the server's answer: the statement failed and rolled
// back).
func writeErr(err error) error {
	var pgErr *pgconn.PgError
	var connErr *pgconn.ConnectError
	if errors.As(err, &pgErr) || errors.As(err, &connErr) || pgconn.SafeToRetry(err) {
		return err
	}
	return fmt.Errorf("%w: %w", session.ErrOutcomeUnknown, err)
}

func scanInbox(rows pgx.Rows, err error) ([]session.InboxEntry, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (session.InboxEntry, error) {
		var e session.InboxEntry
		var hash, typ, data []byte
		if err := r.Scan(&e.Epoch, &e.Seq, &e.Input.IdempotencyKey, &hash, &typ, &data, &e.Attempts); err != nil {
			return e, err
		}
		copy(e.BodyHash[:], hash)
		e.Input.Type, e.Input.Data = string(typ), json.RawMessage(data)
		return e, nil
	})
}

// scanHistory reads newest-first rows and returns them oldest first.
func scanHistory(rows pgx.Rows, err error) ([]session.StoredMessage, error) {
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (session.StoredMessage, error) {
		var m session.StoredMessage
		var content []byte
		err := r.Scan(&m.N, &m.Turn.Epoch, &m.Turn.Seq, &m.Role, &content, &m.Stopped)
		m.Content = string(content)
		return m, err
	})
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, err
}
