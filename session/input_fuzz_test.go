package session_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/relaygw/relay/gateway"
	"github.com/relaygw/relay/internal/testenv"
	"github.com/relaygw/relay/session"
)

// FuzzInputCheckpoints: whatever the input decoder (gateway.DecodeInput, the
// one parser of HTTP bodies and channel pushes) accepts can be checkpointed
// by the memory and the Postgres checkpoint stores, and reads back equal:
// the same type and idempotency key, data equal as JSON (jsonb normalises
// whitespace, key order, duplicate keys and number spelling, never a value)
// and the same history text. One Postgres schema serves the whole run.
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
	pg := session.NewPostgresCheckpointStore(testenv.Postgres(f))
	mem := session.NewMemoryCheckpointStore()
	stores := []struct {
		name string
		s    session.CheckpointStore
	}{{"memory", mem}, {"postgres", pg}}
	f.Fuzz(func(t *testing.T, body []byte) {
		in, err := gateway.DecodeInput(body)
		if err != nil {
			return
		}
		doc, err := session.EncodeTurnCheckpoint(in, session.Position{Epoch: 1, Seq: 7})
		if err != nil {
			t.Fatalf("accepted %q, but the checkpoint does not encode: %v", body, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, st := range stores {
			if err := st.s.Save(ctx, "fuzz", 1, doc); err != nil {
				t.Fatalf("accepted %q, but the %s store refuses its checkpoint: %v", body, st.name, err)
			}
			c, ok, err := st.s.Load(ctx, "fuzz")
			if err != nil || !ok {
				t.Fatalf("%s store: load after save: ok=%v err=%v", st.name, ok, err)
			}
			got, msg, err := session.DecodeTurnCheckpoint(c.Data)
			if err != nil {
				t.Fatalf("%s store: the checkpoint read back does not decode: %v\n%s", st.name, err, c.Data)
			}
			if got.Type != in.Type || got.IdempotencyKey != in.IdempotencyKey {
				t.Fatalf("%s store: type/key %q/%q read back as %q/%q", st.name, in.Type, in.IdempotencyKey, got.Type, got.IdempotencyKey)
			}
			if err := jsonEqual(in.Data, got.Data); err != nil {
				t.Fatalf("%s store: data %s read back as %s: %v", st.name, in.Data, got.Data, err)
			}
			if want := session.InputText(in); msg.Content != want || msg.Role != "user" {
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
