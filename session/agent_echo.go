package session

import (
	"context"
	"strings"
	"time"
)

// EchoAgent answers every input with its own text. It streams the text
// (data.text, else the raw data) back word by word as delta events with data
// {"text":"word "}, waiting Delay between words, and returns the whole text
// as the final assistant message. It stops with ctx's error when ctx ends.
type EchoAgent struct {
	Delay time.Duration
}

var _ Agent = EchoAgent{}

type deltaData struct {
	Text string `json:"text"`
}

// Run implements Agent.
func (e EchoAgent) Run(ctx context.Context, turn Turn, emit Emit) (Message, error) {
	text := inputText(turn.Input)
	for i, w := range strings.Fields(text) {
		if i > 0 && e.Delay > 0 {
			t := time.NewTimer(e.Delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return Message{}, ctx.Err()
			case <-t.C:
			}
		}
		if err := emit(ctx, TypeDelta, deltaData{Text: w + " "}); err != nil {
			return Message{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return Message{}, err
	}
	return Message{Role: "assistant", Content: text}, nil
}
