package session

import (
	"context"
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

// recordingAgent emits the data it is given and replies with reply; it
// records what emit returned.
type recordingAgent struct {
	emits []any
	reply Message
	errs  []error
}

func (a *recordingAgent) Run(ctx context.Context, _ Turn, emit Emit) (Message, error) {
	for _, d := range a.emits {
		a.errs = append(a.errs, emit(ctx, TypeDelta, d))
	}
	return a.reply, nil
}

// TestStorableOutput: an agent's reply and emitted strings holding U+0000
// come out with U+FFFD; emitted raw JSON that no store could keep is
// refused at emit with its rule; everything else passes unchanged.
func TestStorableOutput(t *testing.T) {
	inner := &recordingAgent{
		emits: []any{
			map[string]string{"text": "a\x00b", "k\x00": `\u0000`},
			json.RawMessage(`{"t":"\ud800"}`),
			json.RawMessage(`{"n":1e400}`),
			json.RawMessage(`{"ok":"\u00e9 \\u0000"}`),
		},
		reply: Message{Role: "assistant", Content: "x\x00y"},
	}
	var got []string
	emit := func(_ context.Context, typ string, data any) error {
		raw, err := json.Marshal(data)
		got = append(got, string(raw))
		return err
	}
	a := StorableOutput(inner)
	if StorableOutput(a) != a || StorableOutput(nil) != nil {
		t.Fatal("StorableOutput wraps twice or wraps nil")
	}
	msg, err := a.Run(context.Background(), Turn{}, emit)
	if err != nil || msg.Content != "x\uFFFDy" || msg.Role != "assistant" {
		t.Fatalf("reply %+v, %v", msg, err)
	}
	want := []string{`{"k\ufffd":"\\u0000","text":"a\ufffdb"}`, `{"ok":"\u00e9 \\u0000"}`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("emitted\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for i, rule := range map[int]string{1: RuleSurrogate, 2: RuleNumber} {
		var ie *InputError
		if !errors.As(inner.errs[i], &ie) || ie.Rule != rule {
			t.Fatalf("emit %d returned %v, want rule %s", i, inner.errs[i], rule)
		}
	}
	if inner.errs[0] != nil || inner.errs[3] != nil {
		t.Fatalf("emit errors %v", inner.errs)
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
