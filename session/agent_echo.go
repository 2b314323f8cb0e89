package session

import (
	"context"
	"slices"
	"strings"
	"time"
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
	_ Agent   = EchoAgent{}
	_ Resumer = EchoAgent{}
)

// Resumable implements Resumer: the echo agent continues from the next word.
func (EchoAgent) Resumable() bool { return true }

type deltaData struct {
	Text string `json:"text"`
}

// Run implements Agent.
func (e EchoAgent) Run(ctx context.Context, turn Turn, emit Emit) (Message, error) {
	text := InputText(turn.Input)
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
