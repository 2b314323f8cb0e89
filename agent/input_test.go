package agent

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestValidateInputRules: each rule of the input contract refuses its
// edge and accepts the value just inside it.
func TestValidateInputRules(t *testing.T) {
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	cases := []struct {
		data string
		rule string // "" accepted
	}{
		{nest(MaxInputDepth), ""},
		{nest(MaxInputDepth + 1), RuleDepth},
		{`{"a":` + nest(MaxInputDepth-1) + `}`, ""},
		{`{"a":` + nest(MaxInputDepth) + `}`, RuleDepth},
		{`["\ud800\udc00","\udbff\udfff"]`, ""},
		{`["\ud800"]`, RuleSurrogate},
		{`["\ud800x"]`, RuleSurrogate},
		{`["\ud800\n"]`, RuleSurrogate},
		{`["\ud800\ud800"]`, RuleSurrogate},
		{`["\udfff"]`, RuleSurrogate},
		{`{"\ud800":1}`, RuleSurrogate},
		{`["\\ud800"]`, ""}, // an escaped backslash, then text
		{`["\u0000"]`, RuleNUL},
		{`["\\u0000"]`, ""},
		{`[1e300,-1e-999,0E+999,1.7976931348623157e308]`, ""},
		{`[1e1000]`, RuleNumber},
		{`[0e-1000]`, RuleNumber},
		{`[0e+0000000000000999,1e-0000000000000999]`, ""},
		{`[1.7976931348623159e308]`, RuleNumber},
		{`[` + strings.Repeat("1", MaxNumberLen) + `]`, ""},
		{`[` + strings.Repeat("1", MaxNumberLen+1) + `]`, RuleNumber},
		{`[0.` + strings.Repeat("0", MaxNumberLen-2) + `]`, ""},
		{`[0.` + strings.Repeat("0", MaxNumberLen-1) + `]`, RuleNumber},
		{`{"a" : [ true , false , null , -0.5e-3 ] }`, ""},
		{`[1,`, RuleJSON},
		{"[\"\xff\"]", RuleJSON},
	}
	for _, tc := range cases {
		err := ValidateInput(Input{Type: "message", Data: json.RawMessage(tc.data)})
		var ie *InputError
		switch {
		case tc.rule == "" && err != nil:
			t.Errorf("ValidateInput(%.60s) = %v, want accepted", tc.data, err)
		case tc.rule != "" && (!errors.As(err, &ie) || ie.Rule != tc.rule || !errors.Is(err, ErrInvalidInput)):
			t.Errorf("ValidateInput(%.60s) = %v, want rule %s", tc.data, err, tc.rule)
		}
	}
	for _, in := range []Input{{Type: "m\x00"}, {Type: "m", IdempotencyKey: "k\x00"}} {
		var ie *InputError
		if err := ValidateInput(in); !errors.As(err, &ie) || ie.Rule != RuleNUL {
			t.Errorf("ValidateInput(%+v) = %v, want rule nul", in, err)
		}
	}
}

// BenchmarkValidateInput: the contract check of a 60 KB message body (one
// long text) and of a 4 KB structured one (nested objects, numbers, escapes).
func BenchmarkValidateInput(b *testing.B) {
	text, _ := json.Marshal(map[string]string{"text": strings.Repeat("word ", 12_000)})
	var sb strings.Builder
	sb.WriteString(`{"items":[`)
	for i := 0; i < 60; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"id":12345,"score":-0.125e3,"tags":["a","b\n\u00e9\ud83d\ude00"],"ok":true}`)
	}
	sb.WriteString(`]}`)
	for name, data := range map[string][]byte{"text-60KB": text, "structured-4KB": []byte(sb.String())} {
		in := Input{Type: "message", Data: data}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := ValidateInput(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
