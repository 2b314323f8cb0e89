package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/relaygw/relay/agent"
)

// TypeToolCall and TypeReasoning are the event types this agent emits
// besides delta.
const (
	// TypeToolCall carries one assembled tool call of the reply, in the
	// chat completions shape: {"id":…, "type":"function",
	// "function":{"name":…, "arguments":"<JSON text as the model wrote it>"}}.
	TypeToolCall = "tool_call"
	// TypeReasoning carries a reasoning model's thinking text, {"text":…}
	// (delta.reasoning_content from vLLM and DeepSeek, delta.reasoning
	// from Ollama and OpenRouter). It is not part of the final message.
	TypeReasoning = "reasoning"
)

// maxToolCalls bounds the tool calls of one reply.
const maxToolCalls = 128

// textData is the data of delta and reasoning events.
type textData struct {
	Text string `json:"text"`
}

// ToolCall is the data of a tool_call event.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function ToolFunction `json:"function"`
}

// ToolFunction is the function a ToolCall names, with its arguments as the
// JSON text the model wrote (not checked: a model can write invalid JSON).
type ToolFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// chunk is one chat.completion.chunk, as far as it is read. A chunk whose
// "error" is set, or whose "object" is "error" (vLLM's older shape), is the
// provider reporting a failure.
type chunk struct {
	Object  string          `json:"object"`
	Error   json.RawMessage `json:"error"`
	Message string          `json:"message"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content          *string         `json:"content"`
			ReasoningContent *string         `json:"reasoning_content"`
			Reasoning        *string         `json:"reasoning"`
			ToolCalls        []toolCallDelta `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

// toolCallDelta is a fragment of a streamed tool call: the first fragment
// of a call carries its id, type and name, later ones pieces of its
// arguments; Index says which call a fragment belongs to.
type toolCallDelta struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// toolCall is a tool call being assembled.
type toolCall struct {
	id, typ, name string
	args          strings.Builder
	emitted       bool
}

// stream is the state of one streamed reply: what was received and
// emitted so far.
type stream struct {
	maxReply int
	text     strings.Builder
	size     int // bytes of text, reasoning and tool call fragments
	calls    map[int]*toolCall
	last     int // index of the latest tool call, -1 before any
	finish   string
	done     bool // [DONE] received
	chunks   int  // data events read
	emitted  bool // an event went out: the turn can no longer be retried
}

func newStream(maxReply int) *stream {
	return &stream{maxReply: maxReply, calls: map[int]*toolCall{}, last: -1}
}

// streamError is a failure the provider reported or caused while the
// reply streamed. Retryable is set for a stream that ended early or broke
// before any output (the request may be sent again).
type streamError struct {
	msg       string
	retryable bool
	err       error
}

func (e *streamError) Error() string {
	if e.err != nil {
		return e.msg + ": " + e.err.Error()
	}
	return e.msg
}

func (e *streamError) Unwrap() error { return e.err }

// read consumes an SSE body until [DONE], the end of the body, or a
// failure, emitting as it goes: each content fragment as a delta
// {"text":…}, each reasoning fragment as reasoning {"text":…}, and each
// tool call, once assembled (at the chunk with a finish_reason, or at the
// end of the stream), as tool_call. It returns nil when the reply is whole:
// [DONE] was received, or the body ended cleanly after a finish_reason.
// Otherwise a *streamError says what happened, or emit's error is
// returned as it is (the turn is stopping).
func (s *stream) read(ctx context.Context, body io.Reader, maxChunk int, emit agent.Emit) error {
	r := newSSEReader(body, maxChunk)
	for {
		ev, err := r.next()
		switch {
		case errors.Is(err, io.EOF):
			if s.finish != "" {
				return s.flushCalls(ctx, emit)
			}
			return &streamError{msg: fmt.Sprintf("the stream ended after %d chunks without [DONE] or a finish_reason: the reply is cut short", s.chunks), retryable: true}
		case errors.Is(err, errLineTooLong):
			return &streamError{msg: fmt.Sprintf("chunk %d is too long", s.chunks+1), err: err}
		case err != nil:
			return &streamError{msg: fmt.Sprintf("the stream broke after %d chunks", s.chunks), retryable: true, err: err}
		}
		s.chunks++
		if ev.name == "error" {
			return &streamError{msg: "the provider reported an error mid-stream: " + errorText(ev.data)}
		}
		data := bytes.TrimSpace(ev.data)
		if string(data) == "[DONE]" {
			s.done = true
			return s.flushCalls(ctx, emit)
		}
		if len(data) == 0 {
			continue
		}
		if err := s.chunk(ctx, data, emit); err != nil {
			return err
		}
	}
}

// chunk handles one data event holding a JSON chunk.
func (s *stream) chunk(ctx context.Context, data []byte, emit agent.Emit) error {
	var c chunk
	if err := json.Unmarshal(data, &c); err != nil {
		return &streamError{msg: fmt.Sprintf("chunk %d is not a JSON chat.completion.chunk (%s): %q", s.chunks, err, clip(data, 200))}
	}
	if (len(c.Error) > 0 && string(c.Error) != "null") || c.Object == "error" {
		return &streamError{msg: "the provider reported an error mid-stream: " + errorText(data)}
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // only the first choice is asked for
		}
		d := ch.Delta
		for _, p := range []*string{d.ReasoningContent, d.Reasoning} {
			if p != nil && *p != "" {
				if err := s.out(ctx, emit, TypeReasoning, textData{Text: *p}, len(*p)); err != nil {
					return err
				}
			}
		}
		if d.Content != nil && *d.Content != "" {
			if err := s.out(ctx, emit, agent.TypeDelta, textData{Text: *d.Content}, len(*d.Content)); err != nil {
				return err
			}
			s.text.WriteString(*d.Content)
		}
		for _, tc := range d.ToolCalls {
			if err := s.toolFragment(tc); err != nil {
				return err
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			s.finish = *ch.FinishReason
			switch s.finish {
			case "abort", "error":
				return &streamError{msg: fmt.Sprintf("the provider ended the reply with finish_reason %q", s.finish)}
			}
			if err := s.flushCalls(ctx, emit); err != nil {
				return err
			}
		}
	}
	return nil
}

// completion is a whole (not streamed) chat.completion, as far as it is
// read.
type completion struct {
	Object  string          `json:"object"`
	Error   json.RawMessage `json:"error"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Content   *string         `json:"content"`
			ToolCalls []toolCallDelta `json:"tool_calls"`
		} `json:"message"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

// whole handles a 200 application/json answer: an error object, or one
// chat.completion, emitted as its content in one delta and its tool calls
// (each a whole call, its index or its position giving its order).
func (s *stream) whole(ctx context.Context, raw []byte, emit agent.Emit) error {
	var c completion
	if err := json.Unmarshal(raw, &c); err != nil {
		return &streamError{msg: fmt.Sprintf("the answer is application/json but not a chat.completion (%s): %q", err, clip(raw, 200))}
	}
	if (len(c.Error) > 0 && string(c.Error) != "null") || c.Object == "error" {
		return &streamError{msg: "the provider reported an error: " + errorText(raw)}
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		if m := ch.Message; m.Content != nil && *m.Content != "" {
			if err := s.out(ctx, emit, agent.TypeDelta, textData{Text: *m.Content}, len(*m.Content)); err != nil {
				return err
			}
			s.text.WriteString(*m.Content)
		}
		for i, tc := range ch.Message.ToolCalls {
			if tc.Index == nil {
				tc.Index = &i
			}
			if err := s.toolFragment(tc); err != nil {
				return err
			}
		}
		if ch.FinishReason != nil {
			switch *ch.FinishReason {
			case "abort", "error":
				return &streamError{msg: fmt.Sprintf("the provider ended the reply with finish_reason %q", *ch.FinishReason)}
			}
		}
	}
	return s.flushCalls(ctx, emit)
}

// out emits one event of n bytes of reply, within the reply's bound.
func (s *stream) out(ctx context.Context, emit agent.Emit, typ string, data any, n int) error {
	if err := s.grow(n); err != nil {
		return err
	}
	s.emitted = true
	return emit(ctx, typ, data)
}

func (s *stream) grow(n int) error {
	s.size += n
	if s.size > s.maxReply {
		return &streamError{msg: fmt.Sprintf("the reply is over %d bytes", s.maxReply)}
	}
	return nil
}

// toolFragment adds a tool call fragment to its call. A fragment without
// an index (some servers leave it out) starts a new call when it carries
// an id no call has, and continues the latest call otherwise.
func (s *stream) toolFragment(tc toolCallDelta) error {
	idx := s.last
	switch {
	case tc.Index != nil:
		idx = *tc.Index
	case tc.ID != "" && (s.last < 0 || s.calls[s.last].id != tc.ID):
		idx = s.last + 1
	case idx < 0:
		idx = 0
	}
	c := s.calls[idx]
	if c == nil || c.emitted {
		if len(s.calls) >= maxToolCalls {
			return &streamError{msg: fmt.Sprintf("the reply has more than %d tool calls", maxToolCalls)}
		}
		c = &toolCall{}
		s.calls[idx] = c
	}
	if idx > s.last {
		s.last = idx
	}
	if err := s.grow(len(tc.ID) + len(tc.Type) + len(tc.Function.Name) + len(tc.Function.Arguments)); err != nil {
		return err
	}
	if tc.ID != "" {
		c.id = tc.ID
	}
	if tc.Type != "" {
		c.typ = tc.Type
	}
	c.name += tc.Function.Name
	c.args.WriteString(tc.Function.Arguments)
	return nil
}

// flushCalls emits the assembled tool calls not emitted yet, by index.
func (s *stream) flushCalls(ctx context.Context, emit agent.Emit) error {
	idx := make([]int, 0, len(s.calls))
	for i, c := range s.calls {
		if !c.emitted {
			idx = append(idx, i)
		}
	}
	sort.Ints(idx)
	for _, i := range idx {
		c := s.calls[i]
		c.emitted = true
		typ := c.typ
		if typ == "" {
			typ = "function"
		}
		s.emitted = true
		if err := emit(ctx, TypeToolCall, ToolCall{ID: c.id, Type: typ, Function: ToolFunction{Name: c.name, Arguments: c.args.String()}}); err != nil {
			return err
		}
	}
	return nil
}

// errorText is the readable part of a provider's error body or error
// chunk: error.message (with its type and code when given), error as a
// string, or a top-level message (vLLM's older shape); else the body
// itself, clipped.
func errorText(body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    any             `json:"code"`
	}
	if json.Unmarshal(body, &v) == nil {
		var e struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		}
		var s string
		switch {
		case len(v.Error) > 0 && json.Unmarshal(v.Error, &e) == nil && e.Message != "":
			return withKind(e.Message, e.Type, e.Code)
		case len(v.Error) > 0 && json.Unmarshal(v.Error, &s) == nil && s != "":
			return s
		case v.Message != "":
			return withKind(v.Message, v.Type, v.Code)
		}
	}
	b := bytes.TrimSpace(body)
	if len(b) == 0 {
		return "(no error body)"
	}
	return fmt.Sprintf("%q", clip(b, 500))
}

func withKind(msg, typ string, code any) string {
	var kind []string
	if typ != "" {
		kind = append(kind, "type "+typ)
	}
	if code != nil && code != "" {
		kind = append(kind, fmt.Sprintf("code %v", code))
	}
	if len(kind) == 0 {
		return msg
	}
	return msg + " (" + strings.Join(kind, ", ") + ")"
}

// clip returns at most n bytes of b, marking a cut with "…".
func clip(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
