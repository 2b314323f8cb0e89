package session

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/relaygw/relay/agent"
)

func TestEchoAgentStreamsWords(t *testing.T) {
	var deltas []string
	emit := func(_ context.Context, typ string, data any) error {
		if typ != agent.TypeDelta {
			t.Fatalf("emitted %q", typ)
		}
		raw, err := json.Marshal(data)
		if err != nil {
			t.Fatal(err)
		}
		deltas = append(deltas, string(raw))
		return nil
	}
	for _, tc := range []struct {
		data json.RawMessage
		text string
	}{
		{json.RawMessage(`{"text":"hello  big world"}`), "hello  big world"},
		{json.RawMessage(`"plain words"`), "plain words"},
		{json.RawMessage(`{"n":1}`), `{"n":1}`},
	} {
		deltas = nil
		msg, err := EchoAgent{}.Run(context.Background(), agent.Turn{Input: agent.Input{Type: "message", Data: tc.data}}, emit)
		if err != nil {
			t.Fatal(err)
		}
		if msg != (agent.Message{Role: "assistant", Content: tc.text}) {
			t.Fatalf("final message %+v, want %q", msg, tc.text)
		}
		if len(deltas) == 0 {
			t.Fatalf("no deltas for %s", tc.data)
		}
	}
	deltas = nil
	if _, err := (EchoAgent{}).Run(context.Background(), agent.Turn{Input: textInput("hello  big world", "")}, emit); err != nil {
		t.Fatal(err)
	}
	want := []string{`{"text":"hello "}`, `{"text":"big "}`, `{"text":"world "}`}
	if !reflect.DeepEqual(deltas, want) {
		t.Fatalf("deltas %v, want %v", deltas, want)
	}
}

func TestEchoAgentHonoursContextBetweenWords(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	emitted := 0
	emit := func(context.Context, string, any) error {
		emitted++
		cancel() // the turn is cancelled while the agent waits for the next word
		return nil
	}
	_, err := EchoAgent{Delay: time.Hour}.Run(ctx, agent.Turn{Input: textInput("one two three", "")}, emit)
	if !errors.Is(err, context.Canceled) || emitted != 1 {
		t.Fatalf("err %v after %d deltas, want context.Canceled after 1", err, emitted)
	}
}

func TestEchoAgentStopsOnEmitError(t *testing.T) {
	stop := errors.New("fenced")
	_, err := EchoAgent{}.Run(context.Background(), agent.Turn{Input: textInput("a b", "")},
		func(context.Context, string, any) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("err %v, want the emit error", err)
	}
}
