package gateway

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/relaygw/relay/agent"
)

// TestDecodeInputRejectsUnrelayable: input that would break observers is
// refused with 400 invalid_body, and input no store could keep with 422
// invalid_input naming the rule. Invalid UTF-8 would be relayed verbatim in
// text frames (browsers close the socket on it, and the replay log would
// hand it to every rejoin); a \u0000 escape, a lone surrogate, a number
// beyond numeric or data nested past the checkpoint's encoding limit made
// the checkpoint fail, which stood the session down for good.
func TestDecodeInputRejectsUnrelayable(t *testing.T) {
	deep := func(n int) string {
		return `{"data":` + strings.Repeat(`{"a":`, n-1) + `{}` + strings.Repeat(`}`, n-1) + `}`
	}
	badBody := map[string]string{
		"invalid utf-8 in data": "{\"data\":{\"text\":\"a\xff\xfe b\"}}",
		"invalid utf-8 in key":  "{\"data\":{},\"idempotency_key\":\"k\xc3\"}",
		"null body":             `null`,
		"json string body":      `"x"`,
		"whitespace then null":  " \n null",
	}
	for name, body := range badBody {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeInput([]byte(body))
			ae, ok := err.(*apiError)
			if !ok || ae.Code != CodeInvalidBody || ae.Status != 400 {
				t.Fatalf("DecodeInput(%q) = %v, want invalid_body", body, err)
			}
		})
	}
	badInput := map[string]struct{ body, rule string }{
		"nul in data text":            {`{"data":{"text":"a\u0000b"}}`, agent.RuleNUL},
		"nul in data key":             {`{"data":{"te\u0000xt":"a"}}`, agent.RuleNUL},
		"nul after other escapes":     {`{"data":{"text":"\\\"\n\u0000"}}`, agent.RuleNUL},
		"nul in idempotency key":      {`{"data":{},"idempotency_key":"k\u0000"}`, agent.RuleNUL},
		"nul in type":                 {`{"type":"m\u0000","data":{}}`, agent.RuleNUL},
		"nul deep in nested data":     {`{"data":{"a":[{"b":"\u0000"}]}}`, agent.RuleNUL},
		"nul escape in array string":  {`{"data":{"a":["x","\u0000"]}}`, agent.RuleNUL},
		"data nested 9998 deep":       {deep(9998), agent.RuleDepth},
		"data nested 65 deep":         {deep(65), agent.RuleDepth},
		"data nested 20000 deep":      {deep(20000), agent.RuleDepth},
		"arrays nested 20000 deep":    {`{"data":{"a":` + strings.Repeat(`[`, 20000) + strings.Repeat(`]`, 20000) + `}}`, agent.RuleDepth},
		"unclosed 20000 deep":         {`{"data":` + strings.Repeat(`[`, 20000), agent.RuleDepth},
		"lone high surrogate in data": {`{"data":{"text":"\ud800"}}`, agent.RuleSurrogate},
		"high then non-surrogate":     {`{"data":{"text":"\ud800\u0041"}}`, agent.RuleSurrogate},
		"high then low then high":     {`{"data":{"text":"\ud83d\ude00\ud83d"}}`, agent.RuleSurrogate},
		"lone low surrogate":          {`{"data":{"text":"x\udc00"}}`, agent.RuleSurrogate},
		"surrogate in a key":          {`{"data":{"\uDBFF":1}}`, agent.RuleSurrogate},
		"numeric overflow":            {`{"data":{"n":1e200000}}`, agent.RuleNumber},
		"beyond float64":              {`{"data":{"n":1e309}}`, agent.RuleNumber},
		"zero with a huge exponent":   {`{"data":{"n":0e-16384}}`, agent.RuleNumber},
		"long number":                 {`{"data":{"n":1.` + strings.Repeat("0", 99) + `}}`, agent.RuleNumber},
	}
	for name, tc := range badInput {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeInput([]byte(tc.body))
			ae, ok := err.(*apiError)
			if !ok || ae.Code != CodeInvalidInput || ae.Status != 422 || !strings.Contains(ae.Message, "input rule "+tc.rule+":") {
				t.Fatalf("DecodeInput(%.80q) = %v, want 422 invalid_input naming rule %s", tc.body, err, tc.rule)
			}
		})
	}
	good := map[string]string{
		"escaped backslash then u0000 text": `{"data":{"text":"\\u0000"}}`,
		"other unicode escapes":             `{"data":{"text":"\u00e9\u0001\ud83d\ude00"}}`,
		"upper-case surrogate pair":         `{"data":{"text":"\uD83D\uDE00"}}`,
		"multibyte utf-8":                   `{"data":{"text":"héllo 😀"}}`,
		"leading whitespace":                " \t{\"data\":{}}",
		"data nested 64 deep":               deep(64),
		"largest float64":                   `{"data":{"n":-1.7976931348623157e308}}`,
		"underflow to zero":                 `{"data":{"n":1e-400}}`,
		"exponent 999":                      `{"data":{"n":0E-999,"m":1e+0099}}`,
		"number of 100 characters":          `{"data":{"n":1.` + strings.Repeat("0", 98) + `}}`,
	}
	for name, body := range good {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeInput([]byte(body)); err != nil {
				t.Fatalf("DecodeInput(%.80q) = %v, want accepted", body, err)
			}
		})
	}
}

// FuzzDecodeInputRelayable: whatever DecodeInput accepts can be relayed in a
// text frame and meets the input contract.
func FuzzDecodeInputRelayable(f *testing.F) {
	for _, s := range []string{`{"data":{"text":"a\u0000"}}`, "{\"data\":{\"t\":\"\xff\"}}", `{"data":{"t":"\\u0000"}}`, `null`, `{"data":{}}`,
		`{"data":{"t":"\ud800"}}`, `{"data":{"n":1e999}}`, `{"data":[[[[]]]]}`} {
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
		if err := agent.ValidateInput(in); err != nil {
			t.Fatalf("accepted %q that the input contract refuses: %v", body, err)
		}
	})
}
