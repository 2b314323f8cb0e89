package muster

import (
	"errors"
	"fmt"
	"testing"
)

func TestWireRoundTrip(t *testing.T) {
	v := uint64(42)
	wm := Seq{3, 4}
	in := &wireMsg{Kind: kindRound, Inc: 7, Groups: []string{"a", "b"}, Seq: Seq{7, 9}, View: &v, WM: &wm, Full: true}
	out, err := decode(encode(in))
	if err != nil {
		t.Fatal(err)
	}
	if out.Kind != in.Kind || out.Inc != 7 || len(out.Groups) != 2 || out.Seq != in.Seq || *out.View != 42 || *out.WM != wm || !out.Full {
		t.Fatalf("round trip changed the message: %+v", out)
	}
}

func TestWireRejects(t *testing.T) {
	for _, s := range []string{``, `{}`, `{"k":"nope","i":1}`, `{"k":"ping"}`, `{"k":"mark","i":1}`, `{"k":"ping","i":1,"s":[1]}`, `[1,2]`} {
		if _, err := decode([]byte(s)); !errors.Is(err, ErrBadMessage) {
			t.Errorf("decode(%q) = %v, want ErrBadMessage", s, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"k":"occ","i":1,"g":"x","s":[1,2]}`))
	f.Add([]byte(`{"k":"round","i":1,"gs":["a"],"s":[1,2],"v":3,"full":true}`))
	f.Add([]byte(`{"k":"mark","i":5,"s":[5,1],"v":9}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decode(b)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error %v does not wrap ErrBadMessage", err)
			}
			return
		}
		again, err := decode(encode(m))
		if err != nil {
			t.Fatalf("re-decode of a valid message failed: %v", err)
		}
		if again.Kind != m.Kind || again.Inc != m.Inc || again.Seq != m.Seq || again.Group != m.Group {
			t.Fatalf("re-decode changed message: %+v vs %+v", again, m)
		}
	})
}

// A remote error is matched by the code it carries on the wire, never by its
// text: a RemoteError whose message reads like ErrNotPeer but carries no
// code does not match, one with the code matches whatever its text.
func TestRemoteErrorMatchesByCode(t *testing.T) {
	byText := &RemoteError{Message: ErrNotPeer.Error()}
	if errors.Is(byText, ErrNotPeer) {
		t.Fatal("a remote error matched ErrNotPeer by its text")
	}
	byCode := NewRemoteError(fmt.Errorf("round from b: %w", ErrNotPeer))
	if byCode.Code != CodeNotPeer || !errors.Is(fmt.Errorf("call: %w", byCode), ErrNotPeer) {
		t.Fatalf("remote error %+v does not match ErrNotPeer by code", byCode)
	}
	if errors.Is(byCode, ErrBadMessage) || errors.Is(byCode, ErrClosed) {
		t.Fatal("a not_peer remote error matched another code")
	}
	if c := ErrorCode(fmt.Errorf("%w: junk", ErrBadMessage)); c != CodeBadMessage {
		t.Fatalf("ErrorCode of a wrapped ErrBadMessage = %q", c)
	}
}
