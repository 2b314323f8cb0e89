package session

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/relaygw/relay/agent"
)

// EchoAgent answers every input with its own text. It streams the text
// (data.text, else the raw data) back word by word as delta events with data
// {"text":"word "}, waiting Delay between words, and returns the whole text
// as the final assistant message. It stops with ctx's error when ctx ends.
//
// It resumes (Resumer): given Turn.Resume, it skips the words the partial
// text already holds and streams from the next one, so across owners every
// word is emitted exactly once; the final message is still the whole text.
// A partial text that is not a prefix of the input's words (another agent's
// journal) restarts the words from the first.
type EchoAgent struct {
	Delay time.Duration
}

var (
	_ agent.Agent   = EchoAgent{}
	_ agent.Resumer = EchoAgent{}
)

// Resumable implements Resumer: the echo agent continues from the next word.
func (EchoAgent) Resumable() bool { return true }

type deltaData struct {
	Text string `json:"text"`
}

// echoAsk is the data of an echo input that asks first: {"text","ask":true}.
type echoAsk struct {
	Text string `json:"text"`
	Ask  bool   `json:"ask"`
}

// EchoApproval is the kind of the echo agent's interrupt; its payload is
// {"question":…,"choices":["approve","deny"],"text":…}, and the answer's
// value "approve" streams the text.
const EchoApproval = "approval"

// Run implements Agent.
//
// An input {"text":…,"ask":true} makes the echo agent end its turn with an
// interrupt (id "ask-<epoch>-<seq>", kind EchoApproval) before streaming
// anything. Its continuation (Turn.Answer) streams the text if the value
// is "approve", else answers "(not approved)".
func (e EchoAgent) Run(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error) {
	text := agent.InputText(turn.Input)
	if a := turn.Answer; a != nil && a.Interrupt.Kind == EchoApproval {
		var p echoAsk
		_ = json.Unmarshal(a.Interrupt.Payload, &p)
		text = "(not approved)"
		var v string
		if json.Unmarshal(a.Value, &v) == nil && v == "approve" {
			text = p.Text
		}
	} else {
		var ask echoAsk
		if json.Unmarshal(turn.Input.Data, &ask) == nil && ask.Ask {
			payload, _ := json.Marshal(map[string]any{
				"question": "Stream this reply?", "choices": []string{"approve", "deny"}, "text": ask.Text,
			})
			iv := agent.Interrupt{ID: "ask-" + turn.ID.String(), Kind: EchoApproval, Payload: payload}
			if err := emit(ctx, agent.TypeInterrupt, iv); err != nil {
				return agent.Message{}, err
			}
			return agent.Message{}, nil
		}
	}
	words := strings.Fields(text)
	if turn.Resume != nil {
		done := strings.Fields(turn.Resume.Text)
		if len(done) <= len(words) && slices.Equal(done, words[:len(done)]) {
			words = words[len(done):]
		}
	}
	for i, w := range words {
		if i > 0 && e.Delay > 0 {
			t := time.NewTimer(e.Delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return agent.Message{}, ctx.Err()
			case <-t.C:
			}
		}
		if err := emit(ctx, agent.TypeDelta, deltaData{Text: w + " "}); err != nil {
			return agent.Message{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return agent.Message{}, err
	}
	return agent.Message{Role: "assistant", Content: text}, nil
}
