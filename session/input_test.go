package session

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/relaygw/relay/agent"
)

// recordingAgent emits the data it is given and replies with reply; it
// records what emit returned.
type recordingAgent struct {
	emits []any
	reply agent.Message
	errs  []error
}

func (a *recordingAgent) Run(ctx context.Context, _ agent.Turn, emit agent.Emit) (agent.Message, error) {
	for _, d := range a.emits {
		a.errs = append(a.errs, emit(ctx, agent.TypeDelta, d))
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
		reply: agent.Message{Role: "assistant", Content: "x\x00y"},
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
	msg, err := a.Run(context.Background(), agent.Turn{}, emit)
	if err != nil || msg.Content != "x\uFFFDy" || msg.Role != "assistant" {
		t.Fatalf("reply %+v, %v", msg, err)
	}
	want := []string{`{"k\ufffd":"\\u0000","text":"a\ufffdb"}`, `{"ok":"\u00e9 \\u0000"}`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("emitted\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for i, rule := range map[int]string{1: agent.RuleSurrogate, 2: agent.RuleNumber} {
		var ie *agent.InputError
		if !errors.As(inner.errs[i], &ie) || ie.Rule != rule {
			t.Fatalf("emit %d returned %v, want rule %s", i, inner.errs[i], rule)
		}
	}
	if inner.errs[0] != nil || inner.errs[3] != nil {
		t.Fatalf("emit errors %v", inner.errs)
	}
}
