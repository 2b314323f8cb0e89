package session

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/relaygw/relay/agent"
)

// MemorySessionStore is a SessionStore kept in process memory, for the
// embedded single-node mode and for tests. Its fence and its key retention
// are the Postgres store's, with the store's clock (WithMemoryClock)
// standing in for the database's. Inputs and messages are copied in and
// out. Safe for concurrent use.
type MemorySessionStore struct {
	opts memoryOptions
	mu   sync.Mutex
	rows map[string]*memSession
}

type memSession struct {
	epoch, seq int64
	mode       string // the double-texting mode ("": none set)
	inbox      []InboxEntry
	history    []StoredMessage
	keys       map[string]memKey
}

type memKey struct {
	rec KeyRecord
	at  time.Time
}

var _ SessionStore = (*MemorySessionStore)(nil)

// NewMemorySessionStore returns an empty in-memory session store.
func NewMemorySessionStore(opts ...MemoryOption) *MemorySessionStore {
	return &MemorySessionStore{opts: newMemoryOptions(opts), rows: make(map[string]*memSession)}
}

// fence returns key's row if epoch may write it (raising its epoch), or an
// error wrapping ErrFenced. create makes a missing row. Call with mu held.
func (s *MemorySessionStore) fence(op, key string, epoch int64, create bool) (*memSession, error) {
	r := s.rows[key]
	if r == nil {
		if !create {
			return nil, fmt.Errorf("session: %s %q epoch %d: no session row: %w", op, key, epoch, ErrFenced)
		}
		r = &memSession{keys: make(map[string]memKey)}
		s.rows[key] = r
	}
	if r.epoch > epoch {
		return nil, fmt.Errorf("session: %s %q epoch %d (stored %d): %w", op, key, epoch, r.epoch, ErrFenced)
	}
	r.epoch = epoch
	return r, nil
}

// Thaw implements SessionStore.
func (s *MemorySessionStore) Thaw(ctx context.Context, key string, epoch int64, q ThawQuery) (Thawed, error) {
	if err := ctx.Err(); err != nil {
		return Thawed{}, fmt.Errorf("session: thaw %q: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var from int64
	if r := s.rows[key]; r != nil {
		from = r.epoch
	}
	r, err := s.fence("thaw", key, epoch, true)
	if err != nil {
		return Thawed{}, err
	}
	th := Thawed{FromEpoch: from, Seq: r.seq, Inbox: slices.Clone(r.inbox), DoubleTexting: r.mode}
	if n := min(q.HistoryWindow, len(r.history)); n > 0 {
		th.History = slices.Clone(r.history[len(r.history)-n:])
	}
	now := s.opts.now()
	for _, k := range r.keys {
		if age := now.Sub(k.at); age < q.KeyTTL {
			rec := k.rec
			rec.Age = age
			th.Keys = append(th.Keys, rec)
		}
	}
	sort.Slice(th.Keys, func(i, j int) bool { return th.Keys[i].Age > th.Keys[j].Age })
	if n := len(th.Keys) - q.MaxKeys; n > 0 {
		th.Keys = th.Keys[n:]
	}
	return th, nil
}

// Accept implements SessionStore.
func (s *MemorySessionStore) Accept(ctx context.Context, key string, epoch int64, in InboxEntry, keyTTL time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("session: accept %q: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.fence("accept", key, epoch, false)
	if err != nil {
		return err
	}
	in.Input.Data = slices.Clone(in.Input.Data)
	in.Attempts = 0
	if r.mode == "" {
		r.mode = in.DoubleTexting
	}
	in.DoubleTexting = ""
	if i := slices.IndexFunc(r.inbox, func(e InboxEntry) bool { return e.Pos() == in.Pos() }); i >= 0 {
		in.Attempts = r.inbox[i].Attempts
		r.inbox[i] = in
	} else {
		r.inbox = append(r.inbox, in)
	}
	r.seq = max(r.seq, in.Seq)
	now := s.opts.now()
	for k, v := range r.keys {
		if now.Sub(v.at) >= keyTTL {
			delete(r.keys, k)
		}
	}
	if in.Input.IdempotencyKey != "" {
		r.keys[in.Input.IdempotencyKey] = memKey{rec: KeyRecord{Key: in.Input.IdempotencyKey, Epoch: in.Epoch, Seq: in.Seq, BodyHash: in.BodyHash}, at: now}
	}
	return nil
}

// CompleteTurn implements SessionStore.
func (s *MemorySessionStore) CompleteTurn(ctx context.Context, key string, epoch int64, t TurnRecord) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("session: complete turn %q: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.fence("complete turn", key, epoch, false)
	if err != nil {
		return err
	}
	if i := slices.IndexFunc(r.inbox, func(e InboxEntry) bool { return e.Pos() == t.Input }); i >= 0 {
		r.inbox = slices.Delete(r.inbox, i, i+1)
		for _, m := range t.Messages {
			r.history = append(r.history, StoredMessage{N: int64(len(r.history)) + 1, Turn: t.Input, Message: m})
		}
	}
	r.seq = max(r.seq, t.Seq)
	return nil
}

// StartTurn implements SessionStore.
func (s *MemorySessionStore) StartTurn(ctx context.Context, key string, epoch int64, input agent.Position, attempt int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("session: start turn %q: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.fence("start turn", key, epoch, false)
	if err != nil {
		return err
	}
	if i := slices.IndexFunc(r.inbox, func(e InboxEntry) bool { return e.Pos() == input }); i >= 0 {
		r.inbox[i].Attempts = max(r.inbox[i].Attempts, attempt)
	}
	return nil
}

// LookupKey implements SessionStore.
func (s *MemorySessionStore) LookupKey(ctx context.Context, key, idemKey string, keyTTL time.Duration) (KeyRecord, bool, error) {
	if err := ctx.Err(); err != nil {
		return KeyRecord{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[key]
	if r == nil {
		return KeyRecord{}, false, nil
	}
	k, ok := r.keys[idemKey]
	age := s.opts.now().Sub(k.at)
	if !ok || age >= keyTTL {
		return KeyRecord{}, false, nil
	}
	rec := k.rec
	rec.Age = age
	return rec, true, nil
}

// Unfinished implements SessionStore.
func (s *MemorySessionStore) Unfinished(ctx context.Context, limit int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("session: unfinished sessions: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, r := range s.rows {
		if len(out) >= limit {
			break
		}
		if len(r.inbox) > 0 {
			out = append(out, k)
		}
	}
	return out, nil
}

// Read implements SessionStore.
func (s *MemorySessionStore) Read(ctx context.Context, key string, q HistoryQuery) (StoredSession, bool, error) {
	if err := ctx.Err(); err != nil {
		return StoredSession{}, false, fmt.Errorf("session: read %q: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[key]
	if r == nil {
		return StoredSession{}, false, nil
	}
	end := int64(len(r.history))
	if q.Before > 0 {
		end = min(end, q.Before-1)
	}
	start := max(end-int64(max(q.Limit, 0)), 0)
	return StoredSession{
		Epoch:   r.epoch,
		Seq:     r.seq,
		Inbox:   slices.Clone(r.inbox),
		History: slices.Clone(r.history[start:end]),
		Total:   int64(len(r.history)),
		// The mode is the row's, as Thaw returns it.
		DoubleTexting: r.mode,
	}, true, nil
}
