package session

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// snapshotVersion is written into every checkpoint document.
const snapshotVersion = 1

// snapshot is the JSON document an actor writes as its checkpoint:
//
//	{"v":1, "seq":S, "history":[{"role","content"}…],
//	 "keys":[{"key","epoch","seq"}…], "pending":[{"input":{…},"epoch","seq"}…]}
//
// seq is the last sequence number the session assigned; a new owner
// continues from it. keys are the idempotency keys accepted so far, oldest
// first, each with the position of the user_event it was accepted as.
// pending are inputs accepted (their user_event published) whose turn has
// not run yet; a thawed actor runs them.
type snapshot struct {
	Version int            `json:"v"`
	Seq     int64          `json:"seq"`
	History []Message      `json:"history"`
	Keys    []keyEntry     `json:"keys,omitempty"`
	Pending []pendingInput `json:"pending,omitempty"`
}

// keyEntry remembers one accepted idempotency key.
type keyEntry struct {
	Key   string `json:"key"`
	Epoch int64  `json:"epoch"`
	Seq   int64  `json:"seq"`
}

// pendingInput is an accepted input waiting for its turn.
type pendingInput struct {
	Input Input `json:"input"`
	Epoch int64 `json:"epoch"`
	Seq   int64 `json:"seq"`
}

// decodeSnapshot parses a checkpoint document. An empty document is an
// empty snapshot.
func decodeSnapshot(data []byte) (snapshot, error) {
	var s snapshot
	if len(bytes.TrimSpace(data)) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return snapshot{}, fmt.Errorf("session: decode checkpoint: %w", err)
	}
	if s.Version > snapshotVersion {
		return snapshot{}, fmt.Errorf("session: decode checkpoint: version %d is newer than %d", s.Version, snapshotVersion)
	}
	return s, nil
}

// keySet is a bounded set of idempotency keys, evicting the oldest first.
// Not safe for concurrent use (the actor owns it).
type keySet struct {
	max   int
	order []keyEntry // oldest first
	index map[string]Position
}

func newKeySet(max int, entries []keyEntry) *keySet {
	k := &keySet{max: max, index: make(map[string]Position)}
	for _, e := range entries {
		k.add(e.Key, Position{Epoch: e.Epoch, Seq: e.Seq})
	}
	return k
}

// lookup returns the position key was accepted at.
func (k *keySet) lookup(key string) (Position, bool) {
	p, ok := k.index[key]
	return p, ok
}

// add remembers key at p, evicting the oldest keys beyond the bound.
func (k *keySet) add(key string, p Position) {
	if key == "" || k.max <= 0 {
		return
	}
	if _, ok := k.index[key]; ok {
		return
	}
	k.index[key] = p
	k.order = append(k.order, keyEntry{Key: key, Epoch: p.Epoch, Seq: p.Seq})
	if n := len(k.order) - k.max; n > 0 {
		for _, e := range k.order[:n] {
			delete(k.index, e.Key)
		}
		k.order = append([]keyEntry(nil), k.order[n:]...)
	}
}

// entries returns the keys oldest first; the slice must not be modified.
func (k *keySet) entries() []keyEntry { return k.order }

// inputText is the text of an input as the history and the echo agent see
// it: data.text when data is an object with a string "text", the string
// itself when data is a JSON string, else the raw JSON of data.
func inputText(in Input) string {
	raw := bytes.TrimSpace(in.Data)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '{':
		var obj struct {
			Text *string `json:"text"`
		}
		if json.Unmarshal(raw, &obj) == nil && obj.Text != nil {
			return *obj.Text
		}
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	return string(raw)
}
