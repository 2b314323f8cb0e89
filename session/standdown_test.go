package session

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/relaygw/relay/internal/trace"
)

// oneFailedSave fails the second Save only (the first end-of-turn
// checkpoint after the thaw's write), as a store blip or a document the
// store refuses once would.
type oneFailedSave struct {
	CheckpointStore
	saves atomic.Int64
}

func (f *oneFailedSave) Save(ctx context.Context, key string, epoch int64, data []byte) error {
	if f.saves.Add(1) == 2 {
		return errors.New("test: checkpoint refused once")
	}
	return f.CheckpointStore.Save(ctx, key, epoch, data)
}

// A session that stood down after a failed checkpoint is not bricked: its
// events beyond the checkpoint are in the log at its epoch, so a new actor
// at the same epoch would re-use their seqs and every append would come back
// fenced. The stood-down actor gives its lease up, and the next input runs
// at epoch+1 from the last checkpoint.
func TestStandDownAfterCheckpointFailureReleasesLease(t *testing.T) {
	st := memoryStores()
	tr := trace.New()
	cfg, _, _ := testConfig(st, "a/1", tr)
	cfg.Checkpoints = &oneFailedSave{CheckpointStore: st.checkpoints}
	m := startManager(t, cfg)
	first := submit(t, m, "s1", "hello")
	waitFor(t, tr, trace.Kind("session.standdown", "session", "s1"), 1)
	waitGone(t, m, "s1")

	acc, err := m.Accept(context.Background(), "s1", textInput("again", ""))
	if err != nil {
		t.Fatalf("submit after the stand-down: %v\ntrace:\n%s", err, tr.Dump())
	}
	if acc.Epoch != first.Epoch+1 {
		t.Fatalf("accepted at %+v, want epoch %d", acc, first.Epoch+1)
	}
	waitFor(t, tr, trace.Kind("session.emit", "session", "s1", "type", TypeTurnCompleted, "epoch", acc.Epoch), 1)
}
