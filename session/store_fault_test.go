package session

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

var errTestStoreDown = errors.New("test: session store down")

// fault makes the next n calls of one store method fail (n < 0: every
// call); calls counts every call.
type fault struct {
	n, calls atomic.Int64
}

func (f *fault) hit(op string) error {
	f.calls.Add(1)
	for {
		n := f.n.Load()
		switch {
		case n == 0:
			return nil
		case n < 0:
			return fmt.Errorf("%s: %w", op, errTestStoreDown)
		case f.n.CompareAndSwap(n, n-1):
			return fmt.Errorf("%s: %w", op, errTestStoreDown)
		}
	}
}

// faultyStore is a SessionStore whose methods fail on demand, each with an
// error wrapping errTestStoreDown, without reaching the store.
type faultyStore struct {
	SessionStore
	thaw, accept, complete, read fault
	// acceptLands makes Accept land in the store and then report an
	// outcome unknown (an answer lost on the way back).
	acceptLands fault
}

func (f *faultyStore) Thaw(ctx context.Context, key string, epoch int64, q ThawQuery) (Thawed, error) {
	if err := f.thaw.hit("thaw"); err != nil {
		return Thawed{}, err
	}
	return f.SessionStore.Thaw(ctx, key, epoch, q)
}

func (f *faultyStore) Accept(ctx context.Context, key string, epoch int64, in InboxEntry, ttl time.Duration) error {
	if err := f.accept.hit("accept"); err != nil {
		return err
	}
	err := f.SessionStore.Accept(ctx, key, epoch, in, ttl)
	if err == nil {
		if lost := f.acceptLands.hit("accept"); lost != nil {
			return fmt.Errorf("%w: %w", ErrOutcomeUnknown, lost)
		}
	}
	return err
}

func (f *faultyStore) CompleteTurn(ctx context.Context, key string, epoch int64, t TurnRecord) error {
	if err := f.complete.hit("complete turn"); err != nil {
		return err
	}
	return f.SessionStore.CompleteTurn(ctx, key, epoch, t)
}

func (f *faultyStore) Read(ctx context.Context, key string, q HistoryQuery) (StoredSession, bool, error) {
	if err := f.read.hit("read"); err != nil {
		return StoredSession{}, false, err
	}
	return f.SessionStore.Read(ctx, key, q)
}
