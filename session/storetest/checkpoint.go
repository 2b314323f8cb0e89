package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/relaygw/relay/session"
)

// CheckpointStoreSuite checks the epoch fence of CheckpointStore (the seed's
// "The fence") against the fresh, empty stores newStore returns; it calls
// newStore once per subtest.
func CheckpointStoreSuite(t *testing.T, newStore func(t *testing.T) session.CheckpointStore) {
	ctx := context.Background()

	t.Run("LoadMissing", func(t *testing.T) {
		s := newStore(t)
		if _, ok, err := s.Load(ctx, "k"); err != nil || ok {
			t.Fatalf("load of nothing = ok %v err %v, want false nil", ok, err)
		}
	})

	t.Run("SaveThenLoad", func(t *testing.T) {
		s := newStore(t)
		doc := []byte(`{"seq": 7, "history": [{"role": "user", "content": "hi"}]}`)
		if err := s.Save(ctx, "k", 1, doc); err != nil {
			t.Fatalf("save: %v", err)
		}
		c := mustLoad(t, s, "k")
		if c.Epoch != 1 || c.UpdatedAt.IsZero() {
			t.Fatalf("loaded %+v, want epoch 1 and an update time", c)
		}
		assertJSONEqual(t, c.Data, doc)
	})

	t.Run("SameEpochOverwrites", func(t *testing.T) {
		s := newStore(t)
		mustSave(t, s, "k", 3, `{"n":1}`)
		mustSave(t, s, "k", 3, `{"n":2}`)
		assertJSONEqual(t, mustLoad(t, s, "k").Data, []byte(`{"n":2}`))
	})

	t.Run("NewerEpochLands", func(t *testing.T) {
		s := newStore(t)
		mustSave(t, s, "k", 1, `{"n":1}`)
		mustSave(t, s, "k", 2, `{"n":2}`)
		c := mustLoad(t, s, "k")
		if c.Epoch != 2 {
			t.Fatalf("epoch = %d, want 2", c.Epoch)
		}
		assertJSONEqual(t, c.Data, []byte(`{"n":2}`))
	})

	t.Run("StaleEpochFenced", func(t *testing.T) {
		s := newStore(t)
		mustSave(t, s, "k", 5, `{"owner":"new"}`)
		err := s.Save(ctx, "k", 4, []byte(`{"owner":"old"}`))
		if !errors.Is(err, session.ErrFenced) {
			t.Fatalf("stale save = %v, want ErrFenced", err)
		}
		c := mustLoad(t, s, "k")
		if c.Epoch != 5 {
			t.Fatalf("epoch after fenced save = %d, want 5", c.Epoch)
		}
		assertJSONEqual(t, c.Data, []byte(`{"owner":"new"}`))
	})

	t.Run("InvalidJSONRefused", func(t *testing.T) {
		s := newStore(t)
		err := s.Save(ctx, "k", 1, []byte(`{not json`))
		if err == nil || errors.Is(err, session.ErrFenced) {
			t.Fatalf("save of invalid JSON = %v, want a non-fence error", err)
		}
		if _, ok, _ := s.Load(ctx, "k"); ok {
			t.Fatal("invalid save left a checkpoint")
		}
	})

	t.Run("KeysAreIndependent", func(t *testing.T) {
		s := newStore(t)
		mustSave(t, s, "a", 9, `{}`)
		mustSave(t, s, "b", 1, `{"b":true}`)
		if c := mustLoad(t, s, "b"); c.Epoch != 1 {
			t.Fatalf("b epoch = %d, want 1", c.Epoch)
		}
	})

	t.Run("ConcurrentWritersNewestEpochWins", func(t *testing.T) {
		s := newStore(t)
		const writers, rounds = 6, 5
		var wg sync.WaitGroup
		errs := make(chan error, writers*rounds)
		for w := range writers {
			wg.Go(func() {
				for r := range rounds {
					err := s.Save(ctx, "k", int64(w+1), fmt.Appendf(nil, `{"w":%d,"r":%d}`, w+1, r))
					if err != nil && !errors.Is(err, session.ErrFenced) {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("save: %v", err)
		}
		c := mustLoad(t, s, "k")
		if c.Epoch != writers {
			t.Fatalf("final epoch = %d, want %d", c.Epoch, writers)
		}
		var doc struct{ W, R int }
		if err := json.Unmarshal(c.Data, &doc); err != nil || doc.W != writers || doc.R != rounds-1 {
			t.Fatalf("final data %s (%v), want the last write of epoch %d", c.Data, err, writers)
		}
	})
}

func mustSave(t *testing.T, s session.CheckpointStore, key string, epoch int64, doc string) {
	t.Helper()
	if err := s.Save(context.Background(), key, epoch, []byte(doc)); err != nil {
		t.Fatalf("save %s epoch %d: %v", key, epoch, err)
	}
}

func mustLoad(t *testing.T, s session.CheckpointStore, key string) session.Checkpoint {
	t.Helper()
	c, ok, err := s.Load(context.Background(), key)
	if err != nil || !ok {
		t.Fatalf("load %s: ok %v err %v", key, ok, err)
	}
	return c
}

// assertJSONEqual compares two JSON documents by value: a jsonb column
// normalises whitespace and key order.
func assertJSONEqual(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got invalid JSON %q: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("want invalid JSON %q: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("JSON = %s, want %s", bytes.TrimSpace(got), bytes.TrimSpace(want))
	}
}
