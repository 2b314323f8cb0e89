package gateway

import (
	"bytes"
	"testing"
	"unicode/utf8"
)

// TestDecodeInputRejectsUnrelayable: input that would break observers or the
// checkpoint is refused with invalid_body. Invalid UTF-8 would be relayed
// verbatim in text frames (browsers close the socket on it, and the replay
// log would hand it to every rejoin); a \u0000 escape makes Postgres jsonb
// refuse the checkpoint, which stood the session down for good.
func TestDecodeInputRejectsUnrelayable(t *testing.T) {
	bad := map[string]string{
		"invalid utf-8 in data":      "{\"data\":{\"text\":\"a\xff\xfe b\"}}",
		"invalid utf-8 in key":       "{\"data\":{},\"idempotency_key\":\"k\xc3\"}",
		"nul in data text":           `{"data":{"text":"a\u0000b"}}`,
		"nul in data key":            `{"data":{"te\u0000xt":"a"}}`,
		"nul after other escapes":    `{"data":{"text":"\\\"\n\u0000"}}`,
		"nul in idempotency key":     `{"data":{},"idempotency_key":"k\u0000"}`,
		"nul in type":                `{"type":"m\u0000","data":{}}`,
		"null body":                  `null`,
		"json string body":           `"x"`,
		"whitespace then null":       " \n null",
		"nul deep in nested data":    `{"data":{"a":[{"b":"\u0000"}]}}`,
		"nul escape in array string": `{"data":{"a":["x","\u0000"]}}`,
	}
	for name, body := range bad {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeInput([]byte(body))
			ae, ok := err.(*apiError)
			if !ok || ae.Code != CodeInvalidBody || ae.Status != 400 {
				t.Fatalf("DecodeInput(%q) = %v, want invalid_body", body, err)
			}
		})
	}
	good := map[string]string{
		"escaped backslash then u0000 text": `{"data":{"text":"\\u0000"}}`,
		"other unicode escapes":             `{"data":{"text":"\u00e9\u0001\ud83d\ude00"}}`,
		"multibyte utf-8":                   `{"data":{"text":"héllo 😀"}}`,
		"leading whitespace":                " \t{\"data\":{}}",
	}
	for name, body := range good {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeInput([]byte(body)); err != nil {
				t.Fatalf("DecodeInput(%q) = %v, want accepted", body, err)
			}
		})
	}
}

// FuzzDecodeInputRelayable: whatever DecodeInput accepts can be relayed in a
// text frame and stored in jsonb: valid UTF-8 with no \u0000 escape.
func FuzzDecodeInputRelayable(f *testing.F) {
	for _, s := range []string{`{"data":{"text":"a\u0000"}}`, "{\"data\":{\"t\":\"\xff\"}}", `{"data":{"t":"\\u0000"}}`, `null`, `{"data":{}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in, err := DecodeInput(body)
		if err != nil {
			return
		}
		if !utf8.Valid(in.Data) || !utf8.ValidString(in.Type) || !utf8.ValidString(in.IdempotencyKey) {
			t.Fatalf("accepted invalid UTF-8: %q", body)
		}
		if hasNULEscape(in.Data) || bytes.IndexByte([]byte(in.Type+in.IdempotencyKey), 0) >= 0 {
			t.Fatalf("accepted a NUL: %q", body)
		}
	})
}
