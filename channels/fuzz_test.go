package channels

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

var v2TextSeeds = []string{
	`["3","3","room:lobby","phx_join",{"nick":"bob"}]`,
	`["3","4","room:lobby","new_msg",{"body":"hi"}]`,
	`["8","9","room:2","phx_leave",{}]`,
	`[null,"5","phoenix","heartbeat",{}]`,
	`["3","4","room:lobby","phx_reply",{"status":"ok","response":{"id":1}}]`,
	`[null,null,"room:lobby","presence_diff",{"joins":{"u3":{"metas":[{"phx_ref":"F-Jl0aXyZ0AAAAJD"}]}},"leaves":{}}]`,
	`[1,2.5e-3,"t\u00e9\n","e\"",[true,false,null,-0,"x"],{"extra":1}]`,
	`["1","1","t","e",{"a":`,
}

// FuzzDecodeV2Text: the decoder never panics; what it accepts is valid UTF-8
// and valid JSON whose elements agree with encoding/json, re-encodes to a frame that decodes
// the same, and cannot be extended into another valid frame except by
// whitespace (each input is also decoded in two halves: when its first half
// decodes and the rest is not whitespace, the whole must not decode).
func FuzzDecodeV2Text(f *testing.F) {
	for _, s := range v2TextSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for cut := range []int{0, 1} {
			half := data
			if cut == 1 {
				half = data[:len(data)/2]
			}
			m, err := decodeV2Text(half)
			if err != nil {
				continue
			}
			if cut == 1 && len(bytes.TrimLeft(data[len(data)/2:], " \t\r\n")) != 0 {
				if _, err := decodeV2Text(data); err == nil {
					t.Fatalf("both %q and its prefix %q decoded", data, half)
				}
			}
			checkV2Agrees(t, half, m)
		}
	})
}

func checkV2Agrees(t *testing.T, data []byte, m Message) {
	t.Helper()
	if !json.Valid(data) {
		t.Fatalf("accepted invalid JSON %q", data)
	}
	var arr []json.RawMessage
	if err := json.Unmarshal(data, &arr); err != nil || len(arr) < 5 {
		t.Fatalf("accepted %q, encoding/json: %v (%d elements)", data, err, len(arr))
	}
	var topic, event string
	if json.Unmarshal(arr[2], &topic) != nil || json.Unmarshal(arr[3], &event) != nil {
		t.Fatalf("topic/event of %q are not strings", data)
	}
	if topic != m.Topic || event != m.Event {
		t.Fatalf("topic/event %q/%q, encoding/json says %q/%q", m.Topic, m.Event, topic, event)
	}
	if !bytes.Equal(bytes.TrimSpace(arr[4]), m.Payload) {
		t.Fatalf("payload %q, encoding/json says %q", m.Payload, arr[4])
	}
	if !utf8.Valid(data) {
		t.Fatalf("accepted a text frame that is not UTF-8: %q", data)
	}
	f, err := V2.EncodePush(m.JoinRef, m.Ref, m.Topic, m.Event, JSONPayload(m.Payload))
	if err != nil {
		t.Fatal(err)
	}
	m2, err := decodeV2Text(f.Data)
	if err != nil {
		t.Fatalf("re-encoded %q does not decode: %v", f.Data, err)
	}
	if m2.JoinRef != m.JoinRef || m2.Ref != m.Ref || m2.Topic != m.Topic || m2.Event != m.Event || !bytes.Equal(m2.Payload, m.Payload) {
		t.Fatalf("round trip changed %+v into %+v", m, m2)
	}
}

// FuzzDecodeV2Binary: never panics; an accepted frame has valid UTF-8 header
// fields and re-encodes to the same bytes; a decodable first half agrees with the
// whole frame on every header field.
func FuzzDecodeV2Binary(f *testing.F) {
	f.Add([]byte("\x00\x02\x01\x03\x02" + "10" + "1" + "top" + "ev" + "\x01"))
	f.Add([]byte("\x00\x00\x00\x00\x00"))
	f.Add([]byte("\x00\x01\x01\x0a\x02" + "34" + "room:lobby" + "ev" + "payload bytes"))
	f.Add([]byte("\x01\x03\x02\x03\x02" + "100" + "12" + "top" + "ok" + "\x01\x01"))
	f.Add([]byte("\x02\x03\x02topev"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeBinary(data)
		if half, herr := decodeBinary(data[:len(data)/2]); herr == nil {
			if err != nil || half.JoinRef != m.JoinRef || half.Ref != m.Ref || half.Topic != m.Topic || half.Event != m.Event || !bytes.HasPrefix(m.Binary, half.Binary) {
				t.Fatalf("half %+v disagrees with whole %+v (%v)", half, m, err)
			}
		}
		if err != nil {
			return
		}
		// Every accepted header field is valid UTF-8 on its own (two invalid
		// halves can form a valid rune), so it round-trips byte for byte.
		off := 5
		for _, n := range data[1:5] {
			if !utf8.Valid(data[off : off+int(n)]) {
				t.Fatalf("accepted %q with a header field that is not UTF-8", data)
			}
			off += int(n)
		}
		f, err := encodeBinaryClientPush(m.JoinRef, m.Ref, m.Topic, m.Event, m.Binary)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f.Data, data) {
			t.Fatalf("re-encoded %q, want %q", f.Data, data)
		}
	})
}

// FuzzDecodeV1: never panics; what it accepts is valid UTF-8 and a valid JSON object whose
// fields agree with encoding/json; a decodable first half means the rest is
// whitespace; accepted frames survive an encode/decode round trip.
func FuzzDecodeV1(f *testing.F) {
	f.Add([]byte(`{"topic":"room:lobby","event":"phx_join","payload":{},"ref":"1","join_ref":"1"}`))
	f.Add([]byte(`{"topic":"phoenix","event":"heartbeat","payload":{},"ref":"2"}`))
	f.Add([]byte(`{"ref":null,"payload":[1,{"a":"b"}],"event":"e","topic":"t\u00e9","x":{}}`))
	f.Add([]byte(`{"topic":"t","event":"e"`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for cut := range []int{0, 1} {
			half := data
			if cut == 1 {
				half = data[:len(data)/2]
			}
			m, err := decodeV1(half)
			if err != nil {
				continue
			}
			if cut == 1 && len(bytes.TrimLeft(data[len(data)/2:], " \t\r\n")) != 0 {
				if _, err := decodeV2Text(data); err == nil {
					t.Fatalf("both %q and its prefix %q decoded", data, half)
				}
			}
			if !json.Valid(half) {
				t.Fatalf("accepted invalid JSON %q", half)
			}
			var obj struct {
				Topic, Event string
			}
			if err := json.Unmarshal(half, &obj); err != nil {
				t.Fatalf("accepted %q, encoding/json: %v", half, err)
			}
			if !utf8.Valid(half) {
				t.Fatalf("accepted a text frame that is not UTF-8: %q", half)
			}
			f, err := V1.EncodePush(Ref{}, m.Ref, m.Topic, m.Event, JSONPayload(m.Payload))
			if err != nil {
				t.Fatal(err)
			}
			m2, err := decodeV1(f.Data)
			if err != nil || m2.Ref != m.Ref || m2.Topic != m.Topic || m2.Event != m.Event || !bytes.Equal(m2.Payload, m.Payload) {
				t.Fatalf("round trip of %q: %+v %v", half, m2, err)
			}
		}
	})
}
