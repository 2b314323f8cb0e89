package httpagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/relaygw/relay/agent"
)

// step is what one frame of the agent's stream asks of the turn.
type step struct {
	kind stepKind
	// typ and data: the event to emit (stepEmit). data is a JSON object
	// that passes the input contract (agent.ValidateInput).
	typ  string
	data json.RawMessage
	// text: a delta's text (stepEmit of a delta), the final message's
	// content (stepMessage) or the agent's error message (stepError).
	text string
}

type stepKind uint8

const (
	stepNone    stepKind = iota // nothing to do (a chunk with no Relay meaning)
	stepEmit                    // emit typ with data
	stepMessage                 // the final message: the turn ends with text as the reply
	stepError                   // the agent reports an error: the turn fails
	stepDone                    // the stream's end: the reply is the concatenated deltas
	// stepInterrupt: the agent ends the turn with a question; data is the
	// interrupt {"id","kind","payload","expires_at"?} (checked by
	// checkInterrupt), emitted as agent.TypeInterrupt.
	stepInterrupt
)

// ErrProtocol is matched (errors.Is) by every error about a stream that
// breaks the agent protocol (docs/AGENT_PROTOCOL.md): invalid JSON, an
// invalid or reserved event type, a bad event shape, an event or reply over
// its bound.
var ErrProtocol = errors.New("agent stream breaks the protocol")

func protoErr(format string, a ...any) error {
	return fmt.Errorf("httpagent: %s: %w", fmt.Sprintf(format, a...), ErrProtocol)
}

// typePattern is the shape of an event type an agent may pass through.
var typePattern = regexp.MustCompile(`^[a-z][a-z0-9_]*(?:[.-][a-z0-9_]+)*$`)

// maxTypeLen bounds an event type's length in bytes.
const maxTypeLen = 64

// reservedType reports whether typ is a Relay event type an agent may not
// emit: the session lifecycle types (the actor emits them), and the channel
// layer's own names (phx_*, presence_*, replay_*).
func reservedType(typ string) bool {
	switch typ {
	case agent.TypeUserEvent, agent.TypeTurnStarted, agent.TypeTurnResumed,
		agent.TypeTurnCompleted, agent.TypeTurnFailed, agent.TypeTurnStopped,
		agent.TypeInterruptExpired:
		return true
	}
	return strings.HasPrefix(typ, "phx_") || strings.HasPrefix(typ, "presence_") || strings.HasPrefix(typ, "replay_")
}

// aiSDKChunk names the chunk types of the Vercel AI SDK UI message stream
// (docs/AGENT_PROTOCOL.md "Vercel AI SDK UI message streams").
var aiSDKChunk = map[string]bool{
	"start": true, "finish": true, "abort": true, "start-step": true, "finish-step": true,
	"text-start": true, "text-delta": true, "text-end": true,
	"reasoning-start": true, "reasoning-delta": true, "reasoning-end": true,
	"tool-input-start": true, "tool-input-delta": true, "tool-input-available": true,
	"tool-input-error": true, "tool-output-available": true, "tool-output-error": true,
	"source-url": true, "source-document": true, "file": true, "message-metadata": true,
}

// decoder turns frames into steps. It decides once, on the first frame (or
// from the response header), whether the stream is Relay's own format or a
// Vercel AI SDK UI message stream.
type decoder struct {
	aiSDK   bool
	decided bool
	tools   map[string]string // AI SDK: tool call id → tool name
}

// envelope is a Relay-format frame: {"type":…, "data":{…}}. For AI SDK
// chunks the other fields are read from the raw frame.
type envelope struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// decode maps one frame.
func (d *decoder) decode(f frame) (step, error) {
	if bytes.Equal(bytes.TrimSpace(f.Data), []byte("[DONE]")) {
		return step{kind: stepDone}, nil
	}
	if !utf8.Valid(f.Data) {
		return step{}, protoErr("an event is not valid UTF-8")
	}
	if f.Event != "" && f.Event != "message" {
		// SSE with the type as the event name and the data object as data.
		d.decided = true
		return d.relayEvent(f.Event, f.Data)
	}
	if !json.Valid(f.Data) {
		return step{}, protoErr("an event is not valid JSON: %q", excerpt(f.Data))
	}
	var env envelope
	if err := json.Unmarshal(f.Data, &env); err != nil {
		return step{}, protoErr("an event is not a JSON object with a string \"type\": %q", excerpt(f.Data))
	}
	if env.Type == "" && f.Event == "message" {
		// SSE "event: message" with the final message's data object.
		d.decided = true
		return d.relayEvent("message", f.Data)
	}
	if !d.decided {
		d.decided = true
		d.aiSDK = aiSDKChunk[env.Type] || strings.HasPrefix(env.Type, "data-")
	}
	if d.aiSDK {
		return d.aiSDKChunk(env.Type, f.Data)
	}
	return d.relayEvent(env.Type, env.Data)
}

// relayEvent maps one event of Relay's own format.
func (d *decoder) relayEvent(typ string, data json.RawMessage) (step, error) {
	if len(bytes.TrimSpace(data)) == 0 || bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		data = json.RawMessage(`{}`)
	}
	switch typ {
	case "delta", "message", "error", "done", agent.TypeInterrupt: // the protocol's own types
	default:
		if err := checkType(typ); err != nil {
			return step{}, err
		}
	}
	if err := checkObject(typ, data); err != nil {
		return step{}, err
	}
	switch typ {
	case "delta":
		var v struct {
			Text *string `json:"text"`
		}
		if json.Unmarshal(data, &v) != nil || v.Text == nil {
			return step{}, protoErr("a delta event needs data {\"text\": string}, got %q", excerpt(data))
		}
		return step{kind: stepEmit, typ: agent.TypeDelta, data: data, text: *v.Text}, nil
	case "message":
		var v struct {
			Content *string `json:"content"`
		}
		if json.Unmarshal(data, &v) != nil || v.Content == nil {
			return step{}, protoErr("a message event needs data {\"content\": string}, got %q", excerpt(data))
		}
		return step{kind: stepMessage, text: *v.Content}, nil
	case "error":
		return step{kind: stepError, text: errorText(data)}, nil
	case "done":
		return step{kind: stepDone}, nil
	case agent.TypeInterrupt:
		iv, err := checkInterrupt(data)
		if err != nil {
			return step{}, err
		}
		return step{kind: stepInterrupt, typ: agent.TypeInterrupt, data: iv}, nil
	}
	return step{kind: stepEmit, typ: typ, data: data}, nil
}

// aiSDKChunk maps one chunk of a Vercel AI SDK UI message stream.
func (d *decoder) aiSDKChunk(typ string, raw json.RawMessage) (step, error) {
	var c struct {
		Delta      string          `json:"delta"`
		ToolCallID string          `json:"toolCallId"`
		ToolName   string          `json:"toolName"`
		Input      json.RawMessage `json:"input"`
		Output     json.RawMessage `json:"output"`
		ErrorText  string          `json:"errorText"`
		Data       json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return step{}, protoErr("an AI SDK %q chunk has a field of the wrong type: %v", typ, err)
	}
	emit := func(typ string, v any) (step, error) {
		data, err := json.Marshal(v)
		if err != nil {
			return step{}, protoErr("an AI SDK chunk cannot be re-encoded: %v", err)
		}
		if err := checkObject(typ, data); err != nil {
			return step{}, err
		}
		s := step{kind: stepEmit, typ: typ, data: data}
		if typ == agent.TypeDelta {
			s.text = c.Delta
		}
		return s, nil
	}
	switch typ {
	case "text-delta":
		return emit(agent.TypeDelta, map[string]string{"text": c.Delta})
	case "reasoning-delta":
		return emit("reasoning", map[string]string{"text": c.Delta})
	case "tool-input-start":
		if d.tools == nil {
			d.tools = make(map[string]string)
		}
		if len(d.tools) < maxTools {
			d.tools[c.ToolCallID] = c.ToolName
		}
		return step{}, nil
	case "tool-input-available", "tool-input-error":
		call := map[string]any{"id": c.ToolCallID, "name": c.ToolName, "input": orNull(c.Input)}
		if typ == "tool-input-error" {
			call["error"] = c.ErrorText
		}
		return emit("tool_call", call)
	case "tool-output-available", "tool-output-error":
		res := map[string]any{"id": c.ToolCallID, "name": d.tools[c.ToolCallID]}
		if typ == "tool-output-error" {
			res["error"] = c.ErrorText
		} else {
			res["output"] = orNull(c.Output)
		}
		return emit("tool_result", res)
	case "error":
		if c.ErrorText == "" {
			c.ErrorText = errorText(raw)
		}
		return step{kind: stepError, text: c.ErrorText}, nil
	case "abort":
		return step{kind: stepError, text: "the agent aborted the stream"}, nil
	case "finish":
		return step{kind: stepDone}, nil
	}
	if name, ok := strings.CutPrefix(typ, "data-"); ok && name != "" {
		t := "data." + name
		if checkType(t) != nil {
			return step{}, nil // a custom data part Relay cannot name: skipped
		}
		return emit(t, map[string]any{"data": orNull(c.Data)})
	}
	// start, start-step, text-start/end, reasoning-start/end,
	// tool-input-delta, finish-step, sources, files, metadata and chunk
	// types of later protocol versions carry nothing clients need from
	// Relay: skipped.
	return step{}, nil
}

// maxKindLen bounds an interrupt's kind, in bytes.
const maxKindLen = 64

// checkInterrupt checks the data of an interrupt event:
// {"id":string,"kind":string,"payload":any?,"expires_at":RFC3339?}. id is
// 1 to 128 characters of [A-Za-z0-9_.:-]; kind is 1 to 64 bytes. It
// returns the interrupt re-encoded with these four fields alone (other
// fields, "turn" included, are dropped: Relay sets the turn).
func checkInterrupt(data json.RawMessage) (json.RawMessage, error) {
	var v struct {
		ID        *string         `json:"id"`
		Kind      *string         `json:"kind"`
		Payload   json.RawMessage `json:"payload,omitempty"`
		ExpiresAt *time.Time      `json:"expires_at,omitempty"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, protoErr("an interrupt event needs data {\"id\": string, \"kind\": string, \"payload\"?: any, \"expires_at\"?: RFC 3339 time}: %v", err)
	}
	switch {
	case v.ID == nil || !agent.ValidID(*v.ID):
		return nil, protoErr("an interrupt event's id must be 1-128 characters of [A-Za-z0-9_.:-], got %q", excerpt(data))
	case v.Kind == nil || *v.Kind == "" || len(*v.Kind) > maxKindLen:
		return nil, protoErr("an interrupt event's kind must be a string of 1-%d bytes, got %q", maxKindLen, excerpt(data))
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, protoErr("an interrupt event cannot be re-encoded: %v", err)
	}
	return out, nil
}

// maxTools bounds the tool names remembered for one AI SDK stream.
const maxTools = 1024

func orNull(r json.RawMessage) json.RawMessage {
	if len(r) == 0 {
		return json.RawMessage("null")
	}
	return r
}

// checkType refuses an event type an agent may not emit.
func checkType(typ string) error {
	switch {
	case len(typ) > maxTypeLen || !typePattern.MatchString(typ):
		return protoErr("event type %q is not a valid type (lower-case letters, digits, _ . -; at most %d bytes)", excerpt([]byte(typ)), maxTypeLen)
	case reservedType(typ):
		return protoErr("event type %q is reserved for Relay", typ)
	}
	return nil
}

// checkObject refuses data that is not a JSON object Relay can store.
func checkObject(typ string, data json.RawMessage) error {
	t := bytes.TrimSpace(data)
	if len(t) == 0 || t[0] != '{' || !json.Valid(t) {
		return protoErr("the data of a %q event is not a JSON object: %q", typ, excerpt(data))
	}
	if err := agent.ValidateInput(agent.Input{Type: typ, Data: data}); err != nil {
		return protoErr("the data of a %q event cannot be stored: %v", typ, err)
	}
	return nil
}

// errorText reads the message of an error event's data: "message", else
// "error" (string or {"message"}), else "errorText", else the raw data.
func errorText(data json.RawMessage) string {
	var v struct {
		Message   string          `json:"message"`
		Error     json.RawMessage `json:"error"`
		ErrorText string          `json:"errorText"`
	}
	_ = json.Unmarshal(data, &v)
	var s string
	switch {
	case v.Message != "":
		s = v.Message
	case len(v.Error) > 0:
		var inner struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(v.Error, &s) != nil && json.Unmarshal(v.Error, &inner) == nil {
			s = inner.Message
		}
	case v.ErrorText != "":
		s = v.ErrorText
	}
	if s == "" {
		s = string(data)
	}
	return excerpt([]byte(s))
}

// excerpt shortens b for an error message (at most 200 bytes, valid UTF-8).
func excerpt(b []byte) string {
	const n = 200
	if len(b) <= n {
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	return strings.ToValidUTF8(string(b[:n]), "\uFFFD") + "…"
}
