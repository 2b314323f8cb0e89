package session

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/relaygw/relay/agent"
)

// refuse returns an *agent.InputError of rule.
func refuse(rule, format string, a ...any) error {
	return &agent.InputError{Rule: rule, Detail: fmt.Sprintf(format, a...)}
}

// StorableOutput wraps an agent so that everything it emits and replies can
// be stored, like accepted input (a failed end-of-turn checkpoint would stand
// the session down, and the accepted turn with it):
//
//   - U+0000 in the reply's role or content, or in a string of emitted data,
//     becomes U+FFFD (jsonb refuses U+0000 in text; Go strings cannot hold an
//     unpaired surrogate, so U+0000 is the one such character encoding/json
//     produces);
//   - emitted data that breaks the depth, surrogate or number rule (only
//     json.RawMessage or json.Number can) is refused at emit with the
//     *InputError, which the agent sees as emit's error.
//
// A nil agent stays nil; wrapping twice wraps once.
func StorableOutput(a agent.Agent) agent.Agent {
	if a == nil {
		return nil
	}
	if _, ok := a.(storableAgent); ok {
		return a
	}
	return storableAgent{a}
}

type storableAgent struct{ agent.Agent }

func (s storableAgent) Run(ctx context.Context, turn agent.Turn, emit agent.Emit) (agent.Message, error) {
	msg, err := s.Agent.Run(ctx, turn, func(ctx context.Context, typ string, data any) error {
		raw, merr := json.Marshal(data)
		if merr != nil {
			return emit(ctx, typ, data) // the actor's emit reports it
		}
		raw = replaceNULEscapes(raw)
		if cerr := agent.ValidateData(raw); cerr != nil {
			return fmt.Errorf("session: emit %q: %w", typ, cerr)
		}
		return emit(ctx, typ, json.RawMessage(raw))
	})
	msg.Role = replaceNUL(msg.Role)
	msg.Content = replaceNUL(msg.Content)
	return msg, err
}

func replaceNUL(s string) string {
	if strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

// replaceNULEscapes rewrites every \u0000 escape of the valid JSON text b as
// \ufffd, in place. Backslashes occur only inside strings, each starting an
// escape, so stepping over every escape's second byte finds exactly the
// escapes (an escaped backslash followed by the text u0000 is left alone).
func replaceNULEscapes(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u0000`)) {
		return b
	}
	for i := 0; i+1 < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) && string(b[i+2:i+6]) == "0000" {
			copy(b[i+2:i+6], "fffd")
		}
		i++ // the escaped byte
	}
	return b
}
