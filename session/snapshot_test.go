package session

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestKeySetEvictsOldest(t *testing.T) {
	k := newKeySet(2, []keyEntry{{"a", 1, 1}})
	k.add("b", Position{1, 2})
	k.add("b", Position{1, 9}) // already known: unchanged
	k.add("c", Position{1, 3})
	if _, ok := k.lookup("a"); ok {
		t.Fatal("oldest key kept beyond the bound")
	}
	if p, ok := k.lookup("b"); !ok || p != (Position{1, 2}) {
		t.Fatalf("b = %v %v", p, ok)
	}
	want := []keyEntry{{"b", 1, 2}, {"c", 1, 3}}
	if !reflect.DeepEqual(k.entries(), want) {
		t.Fatalf("entries %v, want %v", k.entries(), want)
	}
	k.add("", Position{1, 4})
	if len(k.entries()) != 2 {
		t.Fatal("empty key remembered")
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	in := snapshot{
		Version: snapshotVersion,
		Seq:     9,
		History: []Message{{"user", "hi"}, {"assistant", "hi"}},
		Keys:    []keyEntry{{"k", 2, 7}},
		Pending: []pendingInput{{Input: textInput("next", "k2"), Epoch: 2, Seq: 9}},
	}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeSnapshot(data)
	if err != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("round trip = %+v, %v", out, err)
	}
	if s, err := decodeSnapshot(nil); err != nil || s.Seq != 0 {
		t.Fatalf("empty document = %+v, %v", s, err)
	}
	if _, err := decodeSnapshot([]byte(`{"v":99}`)); err == nil {
		t.Fatal("accepted a newer snapshot version")
	}
	if _, err := decodeSnapshot([]byte(`[`)); err == nil {
		t.Fatal("accepted broken JSON")
	}
}

func TestInputText(t *testing.T) {
	for _, tc := range []struct {
		data, want string
	}{
		{`{"text":"hello"}`, "hello"},
		{`{"text":""}`, ""},
		{`{"other":1}`, `{"other":1}`},
		{`"quoted"`, "quoted"},
		{`42`, "42"},
		{``, ""},
	} {
		if got := inputText(Input{Data: json.RawMessage(tc.data)}); got != tc.want {
			t.Errorf("inputText(%s) = %q, want %q", tc.data, got, tc.want)
		}
	}
}
