package channels

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestDecodeV2TextFrames(t *testing.T) {
	cases := []struct {
		in                         string
		joinRef, ref, topic, event string
		payload                    string
	}{
		{`["3","3","room:lobby","phx_join",{"nick":"bob"}]`, `"3"`, `"3"`, "room:lobby", "phx_join", `{"nick":"bob"}`},
		{`[null,"5","phoenix","heartbeat",{}]`, "null", `"5"`, "phoenix", "heartbeat", `{}`},
		{` [ "8" , "9" , "room:2" , "phx_leave" , { } ] `, `"8"`, `"9"`, "room:2", "phx_leave", `{ }`},
		{`[1,2,"t","e",[1,2],"extra",{"x":[]}]`, "1", "2", "t", "e", `[1,2]`},
		{`["\u0033",null,"a\"b","\u00e9v","s"]`, `"\u0033"`, "null", `a"b`, "év", `"s"`},
	}
	for _, c := range cases {
		m, err := V2.Decode(Frame{Data: []byte(c.in)})
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if m.JoinRef.Raw() != c.joinRef || m.Ref.Raw() != c.ref || m.Topic != c.topic || m.Event != c.event || string(m.Payload) != c.payload {
			t.Fatalf("%s: got %s %s %q %q %s", c.in, m.JoinRef.Raw(), m.Ref.Raw(), m.Topic, m.Event, m.Payload)
		}
	}
}

func TestDecodeV2TextRejects(t *testing.T) {
	for _, in := range []string{
		``, `[]`, `{}`, `["1","1","t","e"]`, `["1","1","t","e",{}`, `["1","1","t","e",{}]x`,
		`[{},"1","t","e",{}]`, `["1",true,"t","e",{}]`, `["1","1",3,"e",{}]`, `["1","1","t",null,{}]`,
		`["1","1","t","e",{"a":}]`, `["1","1","t","e",{"a" 1}]`, `["1","1","t","e",01]`, `["1","1","t","e","\x"]`,
		"[\"1\",\"1\",\"t\",\"e\",\"\x01\"]", `["1","1","t","e",tru]`, `["1","1","t","e",{},]`,
		strings.Repeat("[", 600) + strings.Repeat("]", 600),
	} {
		if _, err := V2.Decode(Frame{Data: []byte(in)}); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%q: err %v, want ErrMalformed", in, err)
		}
	}
}

func TestEncodeV2Frames(t *testing.T) {
	jr, ref := StringRef("3"), StringRef("4")
	check := func(f Frame, err error, want string) {
		t.Helper()
		if err != nil || f.Binary || string(f.Data) != want {
			t.Fatalf("got %s (binary %v, err %v), want %s", f.Data, f.Binary, err, want)
		}
	}
	f, err := V2.EncodeReply(jr, ref, "room:lobby", "ok", JSONPayload(json.RawMessage(`{"id":1}`)))
	check(f, err, `["3","4","room:lobby","phx_reply",{"status":"ok","response":{"id":1}}]`)
	f, err = V2.EncodePush(jr, Ref{}, "room:lobby", "new_msg", JSONPayload(json.RawMessage(`{"body":"hi"}`)))
	check(f, err, `["3",null,"room:lobby","new_msg",{"body":"hi"}]`)
	f, err = V2.EncodeBroadcast("room:lobby", "new_msg", json.RawMessage(`{"body":"hi"}`))
	check(f, err, `[null,null,"room:lobby","new_msg",{"body":"hi"}]`)
	f, err = V2.EncodePush(jr, jr, "room:lobby", "phx_close", Payload{})
	check(f, err, `["3","3","room:lobby","phx_close",{}]`)
	f, err = V2.EncodeReply(Ref{}, StringRef("5"), "phoenix", "ok", Payload{})
	check(f, err, `[null,"5","phoenix","phx_reply",{"status":"ok","response":{}}]`)
	f, err = V2.EncodeBroadcast("t\"\n\x01<", "é\xff", nil)
	check(f, err, `[null,null,"t\"\n\u0001<","é\ufffd",{}]`)
}

func TestBinaryFramesFromSpec(t *testing.T) {
	// docs/PHOENIX.md §2.2 byte examples.
	m, err := V2.Decode(Frame{Binary: true, Data: []byte("\x00\x02\x01\x03\x02" + "10" + "1" + "top" + "ev" + "\x01")})
	if err != nil {
		t.Fatal(err)
	}
	if m.JoinRef.String() != "10" || m.Ref.String() != "1" || m.Topic != "top" || m.Event != "ev" || !bytes.Equal(m.Binary, []byte{1}) || !m.IsBinary() {
		t.Fatalf("decoded %+v", m)
	}
	f, err := V2.EncodePush(StringRef("123"), Ref{}, "top", "some-event", BinaryPayload([]byte{1, 1}))
	if want := "\x00\x03\x03\x0a123topsome-event\x01\x01"; err != nil || !f.Binary || string(f.Data) != want {
		t.Fatalf("push %q %v", f.Data, err)
	}
	f, err = V2.EncodeReply(StringRef("100"), StringRef("12"), "top", "ok", BinaryPayload([]byte{1, 1}))
	if want := "\x01\x03\x02\x03\x02" + "100" + "12" + "top" + "ok" + "\x01\x01"; err != nil || !f.Binary || string(f.Data) != want {
		t.Fatalf("reply %q %v", f.Data, err)
	}
	f, err = V2.EncodePush(Ref{}, Ref{}, "top", "ev", BinaryPayload([]byte("data")))
	if want := "\x02\x03\x02topevdata"; err != nil || !f.Binary || string(f.Data) != want {
		t.Fatalf("broadcast %q %v", f.Data, err)
	}
	long := strings.Repeat("x", 256)
	if _, err := V2.EncodePush(Ref{}, Ref{}, long, "ev", BinaryPayload(nil)); !errors.Is(err, ErrFieldTooLong) {
		t.Fatalf("256-byte topic: %v", err)
	}
	if _, err := V2.EncodeReply(StringRef(long), Ref{}, "t", "ok", BinaryPayload(nil)); !errors.Is(err, ErrFieldTooLong) {
		t.Fatalf("256-byte join_ref: %v", err)
	}
	if _, err := V2.EncodePush(StringRef("1"), Ref{}, strings.Repeat("x", 255), "ev", BinaryPayload(nil)); err != nil {
		t.Fatalf("255-byte topic: %v", err)
	}
	for _, bad := range []string{"", "\x00\x01\x01\x01", "\x01\x00\x00\x00\x00", "\x02\x00\x00\x00\x00", "\x00\x05\x00\x00\x00abc"} {
		if _, err := V2.Decode(Frame{Binary: true, Data: []byte(bad)}); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
}

func TestV1Serializer(t *testing.T) {
	m, err := V1.Decode(Frame{Data: []byte(`{"topic":"room:lobby","event":"phx_join","payload":{"a":1},"ref":"2","join_ref":"2","extra":[1]}`)})
	if err != nil {
		t.Fatal(err)
	}
	if m.Topic != "room:lobby" || m.Event != "phx_join" || string(m.Payload) != `{"a":1}` || m.Ref.Raw() != `"2"` || m.JoinRef.Raw() != `"2"` {
		t.Fatalf("decoded %+v", m)
	}
	m, err = V1.Decode(Frame{Data: []byte(`{"topic":"t","event":"e","payload":{},"ref":null}`)})
	if err != nil || !m.JoinRef.IsNull() || !m.Ref.IsNull() {
		t.Fatalf("no join_ref: %+v %v", m, err)
	}
	for _, bad := range []string{`{"topic":"t","event":"e","payload":{}}`, `{"topic":"t","event":"e","ref":"1"}`, `["1","1","t","e",{}]`, `{"topic":1,"event":"e","payload":{},"ref":"1"}`, `{"topic":"t" "event":"e"}`} {
		if _, err := V1.Decode(Frame{Data: []byte(bad)}); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%s: %v", bad, err)
		}
	}
	if _, err := V1.Decode(Frame{Binary: true, Data: []byte{0}}); !errors.Is(err, ErrBinaryUnsupported) {
		t.Fatalf("binary on V1: %v", err)
	}
	f, err := V1.EncodeReply(StringRef("2"), StringRef("3"), "t", "error", JSONPayload(json.RawMessage(`{"reason":"x"}`)))
	if want := `{"topic":"t","event":"phx_reply","payload":{"status":"error","response":{"reason":"x"}},"ref":"3"}`; err != nil || string(f.Data) != want {
		t.Fatalf("reply %s %v", f.Data, err)
	}
	if _, err := V1.EncodePush(Ref{}, Ref{}, "t", "e", BinaryPayload(nil)); !errors.Is(err, ErrBinaryUnsupported) {
		t.Fatalf("binary push on V1: %v", err)
	}
}

func TestSerializerFor(t *testing.T) {
	for vsn, want := range map[string]Serializer{"": V1, "1.0.0": V1, "1.1": V1, "1": V1, "2.0.0": V2, "2.1.3": V2, "2": V2} {
		got, err := SerializerFor(vsn)
		if err != nil || got != want {
			t.Fatalf("vsn %q: %v %v", vsn, got, err)
		}
	}
	for _, vsn := range []string{"3.0.0", "0.1", "2.x", "2.", "abc", "2.0.0-rc"} {
		if _, err := SerializerFor(vsn); !errors.Is(err, ErrUnsupportedVersion) {
			t.Fatalf("vsn %q: %v", vsn, err)
		}
	}
}

func TestRefsEchoedAsSent(t *testing.T) {
	for _, raw := range []string{`"3"`, `7`, `-1.5e3`, `"\u0033"`, `"a b"`} {
		m, err := V2.Decode(Frame{Data: []byte(`[` + raw + `,` + raw + `,"t","e",{}]`)})
		if err != nil {
			t.Fatal(err)
		}
		f, _ := V2.EncodeReply(m.JoinRef, m.Ref, "t", "ok", Payload{})
		if want := `[` + raw + `,` + raw + `,"t","phx_reply",{"status":"ok","response":{}}]`; string(f.Data) != want {
			t.Fatalf("got %s, want %s", f.Data, want)
		}
	}
	if !StringRef("3").Equal(Ref{raw: `"\u0033"`}) || StringRef("3").Equal(Ref{}) || !(Ref{}).Equal(Ref{}) {
		t.Fatal("Ref.Equal compares values")
	}
}
