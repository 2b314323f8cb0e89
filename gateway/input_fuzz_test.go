package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/gateway"
	"github.com/relaygw/relay/internal/testkit/testenv"
	"github.com/relaygw/relay/session"
	"github.com/relaygw/relay/session/pgstore"
)

// FuzzInputCheckpoints: whatever the input decoder (DecodeInput, the one
// parser of HTTP bodies and channel pushes) accepts can be stored by the
// memory and the Postgres session stores, and reads back equal: accepted
// into the inbox, it thaws with the same type, idempotency key and body hash
// and data equal as JSON; its turn completed, the history holds the user's
// message with the same text. One Postgres schema serves the whole run; each
// input gets a session of its own.
func FuzzInputCheckpoints(f *testing.F) {
	for _, s := range []string{
		`{"type":"message","data":{"text":"hi"},"idempotency_key":"k"}`,
		`{"data":{"text":"\ud83d\ude00 \u00e9 \u0001","n":[1.50,-0,1E2,1e-400,-1.7976931348623157e308]}}`,
		`{"data":{"a":{"a":1,"a":2},"b":[{}, [], null, true, false, ""]}}`,
		`{"data":{"text":"\ud800"}}`,
		`{"data":{"text":"a\u0000"}}`,
		`{"data":{"n":1e200000}}`,
		`{"data":{"n":0e-16384}}`,
		`{"data":` + string(bytes.Repeat([]byte(`[`), 70)) + string(bytes.Repeat([]byte(`]`), 70)) + `}`,
		`{"data":{"t":"\\u0000 \\ud800"}}`,
		`{"data":{"a":` + string(bytes.Repeat([]byte(`[`), 200)) + string(bytes.Repeat([]byte(`]`), 200)) + `}}`,
	} {
		f.Add([]byte(s))
	}
	stores := []struct {
		name string
		s    session.SessionStore
	}{{"memory", session.NewMemorySessionStore()}, {"postgres", pgstore.NewSessionStore(testenv.Postgres(f))}}
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, body []byte) {
		in, err := gateway.DecodeInput(body)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		key := fmt.Sprintf("fuzz-%d", n.Add(1))
		entry := session.InboxEntry{Epoch: 1, Seq: 1, Input: in, BodyHash: session.InputHash(in)}
		for _, st := range stores {
			if _, err := st.s.Thaw(ctx, key, 1, session.ThawQuery{}); err != nil {
				t.Fatalf("%s store: thaw: %v", st.name, err)
			}
			if err := st.s.Accept(ctx, key, 1, entry, time.Hour); err != nil {
				t.Fatalf("accepted %q, but the %s store refuses it: %v", body, st.name, err)
			}
			th, err := st.s.Thaw(ctx, key, 1, session.ThawQuery{HistoryWindow: 10, KeyTTL: time.Hour, MaxKeys: 10})
			if err != nil || len(th.Inbox) != 1 {
				t.Fatalf("%s store: thaw after accept: inbox %d, err %v", st.name, len(th.Inbox), err)
			}
			got := th.Inbox[0]
			if got.Input.Type != in.Type || got.Input.IdempotencyKey != in.IdempotencyKey || got.BodyHash != entry.BodyHash {
				t.Fatalf("%s store: type/key %q/%q read back as %q/%q (hash equal: %v)", st.name, in.Type, in.IdempotencyKey, got.Input.Type, got.Input.IdempotencyKey, got.BodyHash == entry.BodyHash)
			}
			if err := jsonEqual(in.Data, got.Input.Data); err != nil {
				t.Fatalf("%s store: data %s read back as %s: %v", st.name, in.Data, got.Input.Data, err)
			}
			want := agent.InputText(in)
			rec := session.TurnRecord{Input: entry.Pos(), Messages: []agent.Message{{Role: "user", Content: want}}, Seq: 2}
			if err := st.s.CompleteTurn(ctx, key, 1, rec); err != nil {
				t.Fatalf("%s store: the turn of %q does not complete: %v", st.name, body, err)
			}
			rd, ok, err := st.s.Read(ctx, key, session.HistoryQuery{Limit: 10})
			if err != nil || !ok || len(rd.History) != 1 || len(rd.Inbox) != 0 {
				t.Fatalf("%s store: read after the turn: ok=%v err=%v history %d inbox %d", st.name, ok, err, len(rd.History), len(rd.Inbox))
			}
			if msg := rd.History[0].Message; msg.Content != want || msg.Role != "user" {
				t.Fatalf("%s store: history message %+v, want user %q", st.name, msg, want)
			}
		}
	})
}

// jsonEqual reports how a and b differ as JSON values: objects by key (the
// last of duplicate keys counts, as in encoding/json and jsonb), arrays by
// element, strings by value and numbers by exact decimal value.
func jsonEqual(a, b []byte) error {
	va, err := decodeNumbers(a)
	if err != nil {
		return err
	}
	vb, err := decodeNumbers(b)
	if err != nil {
		return err
	}
	return valueEqual(va, vb, "$")
}

func decodeNumbers(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

func valueEqual(a, b any, path string) error {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return fmt.Errorf("%s: %v vs %v", path, a, b)
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok {
				return fmt.Errorf("%s: key %q missing", path, k)
			}
			if err := valueEqual(v, w, path+"."+k); err != nil {
				return err
			}
		}
		return nil
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return fmt.Errorf("%s: %v vs %v", path, a, b)
		}
		for i := range x {
			if err := valueEqual(x[i], y[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return fmt.Errorf("%s: %v vs %v", path, a, b)
		}
		rx, okx := new(big.Rat).SetString(string(x))
		ry, oky := new(big.Rat).SetString(string(y))
		if !okx || !oky || rx.Cmp(ry) != 0 {
			return fmt.Errorf("%s: number %s vs %s", path, x, y)
		}
		return nil
	default: // string, bool, nil
		if a != b {
			return fmt.Errorf("%s: %#v vs %#v", path, a, b)
		}
		return nil
	}
}
