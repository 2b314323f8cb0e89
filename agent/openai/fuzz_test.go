package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/relaygw/relay/agent"
	"github.com/relaygw/relay/session"
)

// bodyAgent reads one provider stream from memory, as Agent.attempt reads
// a response body.
// With whole set it reads the body as an application/json answer.
type bodyAgent struct {
	body  []byte
	whole bool
}

func (b bodyAgent) Run(ctx context.Context, _ agent.Turn, emit agent.Emit) (agent.Message, error) {
	st := newStream(1 << 20)
	read := func() error { return st.read(ctx, bytes.NewReader(b.body), 4096, emit) }
	if b.whole {
		read = func() error { return st.whole(ctx, b.body, emit) }
	}
	if err := read(); err != nil {
		return agent.Message{}, err
	}
	return agent.Message{Role: "assistant", Content: st.text.String()}, nil
}

// FuzzStream feeds arbitrary bytes to the SSE reader and chunk decoder,
// and to the decoder of a whole application/json completion.
// Whatever they accept must be emit-able: every event passes the session's
// storable-output check (session.StorableOutput) and the input contract
// (agent.ValidateInput), with a data object, a non-reserved type; a
// failure is a *streamError, never an emit refusal or a panic; and a
// whole reply's message is valid UTF-8 equal to its deltas' texts joined.
func FuzzStream(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.sse"))
	for _, name := range files {
		raw, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	for _, s := range []string{
		"data: [DONE]", "data:{}\n\n", "event: error\ndata: {\"error\":\"x\"}\n\n", "error: {\"message\":\"boom\"}\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"a\\u0000b\"},\"finish_reason\":\"stop\"}]}\n\n",
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\\ud800\",\"arguments\":\"{\\\"a\\\":1e999}\"}}]}}]}\n\ndata: [DONE]\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"\\xff\"}}]}\n\n", ": c\r\ndata: {\"choices\":[]}\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, whole := range []bool{false, true} {
			checkEmitable(t, bodyAgent{body: body, whole: whole})
		}
	})
}

// checkEmitable runs ag as a session would and checks what it emits and
// returns (FuzzStream).
func checkEmitable(t *testing.T, ag agent.Agent) {
	var texts strings.Builder
	msg, err := session.StorableOutput(ag).Run(context.Background(), agent.Turn{}, func(_ context.Context, typ string, data any) error {
		raw, ok := data.(json.RawMessage)
		if !ok {
			t.Fatalf("emit %s: data %T is not the checked raw JSON StorableOutput hands on", typ, data)
		}
		switch typ {
		case agent.TypeDelta, TypeReasoning, TypeToolCall:
		default:
			t.Fatalf("emitted type %q", typ)
		}
		if err := agent.ValidateInput(agent.Input{Type: typ, Data: raw}); err != nil || raw[0] != '{' {
			t.Fatalf("emitted %s %s breaks the input contract: %v", typ, raw, err)
		}
		if typ == agent.TypeDelta {
			var d textData
			if err := json.Unmarshal(raw, &d); err != nil {
				t.Fatal(err)
			}
			texts.WriteString(d.Text)
		}
		return nil
	})
	if err != nil {
		var se *streamError
		if !errors.As(err, &se) {
			t.Fatalf("error %v is not the stream's own", err)
		}
		return
	}
	if !utf8.ValidString(msg.Content) || strings.IndexByte(msg.Content, 0) >= 0 {
		t.Fatalf("message %q is not storable text", msg.Content)
	}
	if want := strings.ReplaceAll(texts.String(), "\x00", "\uFFFD"); msg.Content != want {
		t.Fatalf("message %q, deltas %q", msg.Content, want)
	}
}
