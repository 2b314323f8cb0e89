package httpagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/relaygw/relay/agent"
)

const fuzzMaxEvent = 4096

// checkStep asserts that what the decoder accepted can be emitted and
// stored: an emitted event has a valid, unreserved type and a JSON object
// as data that passes the input contract; texts are valid UTF-8 strings.
func checkStep(t *testing.T, s step) {
	t.Helper()
	switch s.kind {
	case stepEmit:
		if s.typ != agent.TypeDelta {
			if err := checkType(s.typ); err != nil {
				t.Fatalf("emitted type %q: %v", s.typ, err)
			}
		}
		if reservedType(s.typ) || s.typ == agent.TypeMessage {
			t.Fatalf("emitted reserved type %q", s.typ)
		}
		d := bytes.TrimSpace(s.data)
		if len(d) == 0 || d[0] != '{' || !json.Valid(d) {
			t.Fatalf("emitted data %q is not a JSON object", s.data)
		}
		if err := agent.ValidateInput(agent.Input{Type: s.typ, Data: s.data}); err != nil {
			t.Fatalf("emitted data %q cannot be stored: %v", s.data, err)
		}
		if _, err := json.Marshal(json.RawMessage(s.data)); err != nil {
			t.Fatalf("emitted data %q cannot be marshalled: %v", s.data, err)
		}
	case stepInterrupt:
		var iv agent.Interrupt
		if err := json.Unmarshal(s.data, &iv); err != nil || !agent.ValidID(iv.ID) || iv.Kind == "" || len(iv.Kind) > maxKindLen {
			t.Fatalf("interrupt data %q is not an interrupt the session takes: %v", s.data, err)
		}
		if err := agent.ValidateInput(agent.Input{Type: s.typ, Data: s.data}); err != nil {
			t.Fatalf("interrupt data %q cannot be stored: %v", s.data, err)
		}
	case stepNone, stepMessage, stepError, stepDone:
	default:
		t.Fatalf("unknown step kind %d", s.kind)
	}
}

// drain reads every frame of fr through a fresh decoder (aiSDK forces the
// AI SDK mapping) and checks each accepted step, until the first error.
func drain(t *testing.T, fr frameReader, aiSDK bool) {
	dec := &decoder{aiSDK: aiSDK, decided: aiSDK}
	for range 10000 {
		f, err := fr.next()
		if err != nil {
			if err != io.EOF && !errors.Is(err, errFrameTooLarge) {
				t.Fatalf("reader error %v on an in-memory stream", err)
			}
			return
		}
		if len(f.Data) > fuzzMaxEvent {
			t.Fatalf("frame of %d bytes passed the %d bound", len(f.Data), fuzzMaxEvent)
		}
		s, err := dec.decode(f)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("decode error %v is not an ErrProtocol", err)
			}
			continue
		}
		checkStep(t, s)
	}
}

// addAISDKSeed adds the first chunks of the recorded AI SDK stream (whole
// recordings as seeds slow the fuzzing engine's mutator to a crawl).
func addAISDKSeed(f *testing.F) {
	b, err := os.ReadFile("testdata/aisdk-tool-call.sse")
	if err != nil {
		f.Fatal(err)
	}
	events := bytes.SplitAfter(b, []byte("\n\n"))
	f.Add(bytes.Join(append(events[2:4:4], events[9:11]...), nil))
}

// FuzzSSE: any byte stream read as SSE yields bounded frames whose
// accepted events can be emitted and stored.
func FuzzSSE(f *testing.F) {
	f.Add([]byte("data: {\"type\":\"delta\",\"data\":{\"text\":\"a\"}}\n\nevent: tool_call\ndata: {\"id\":1}\r\n\r\n: c\rdata: [DONE]\r\r"))
	f.Add([]byte("event: message\ndata: {\"content\":\"x\"}\n\nevent: turn_failed\ndata: {}\n\n"))
	f.Add([]byte("data: {\"type\":\"status\",\"data\":{\"n\":1e999999,\"s\":\"\\ud800\"}}\n\n"))
	f.Add([]byte("event: interrupt\ndata: {\"id\":\"a-1\",\"kind\":\"approval\",\"payload\":{\"c\":[1]},\"expires_at\":\"2100-01-01T00:00:00Z\",\"turn\":7}\n\n"))
	addAISDKSeed(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		drain(t, newSSEReader(bytes.NewReader(b), fuzzMaxEvent), false)
	})
}

// FuzzNDJSON: any byte stream read as NDJSON yields bounded lines whose
// accepted events can be emitted and stored.
func FuzzNDJSON(f *testing.F) {
	f.Add([]byte("{\"type\":\"delta\",\"data\":{\"text\":\"a\"}}\r\n\n{\"type\":\"x.y-z\",\"data\":null}\n{\"type\":\"done\"}"))
	f.Add([]byte("{\"type\":\"error\",\"data\":{\"error\":{\"message\":\"m\"}}}\n[1,2]\n\"s\"\n"))
	f.Add([]byte("{\"type\":\"interrupt\",\"data\":{\"id\":\"x\",\"kind\":\"k\",\"expires_at\":\"10000-01-01T00:00:00Z\"}}\n{\"type\":\"interrupt\",\"data\":{\"id\":\"x\",\"kind\":\"k\",\"payload\":null}}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		drain(t, newNDJSONReader(bytes.NewReader(b), fuzzMaxEvent), false)
	})
}

// FuzzAISDKChunk: any chunk decoded as a Vercel AI SDK UI message stream
// chunk yields events that can be emitted and stored.
func FuzzAISDKChunk(f *testing.F) {
	f.Add([]byte(`{"type":"tool-input-available","toolCallId":"c","toolName":"t","input":{"a":[1,{"b":null}]}}`))
	f.Add([]byte(`{"type":"tool-output-available","toolCallId":"c","output":"\u0000"}`))
	f.Add([]byte(`{"type":"data-weather","data":{"x":1}}`))
	f.Add([]byte(`{"type":"text-delta","id":"t","delta":"\ud83d\ude00"}`))
	f.Add([]byte(`{"type":"error","errorText":"boom"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dec := &decoder{aiSDK: true, decided: true}
		dec.decode(frame{Data: []byte(`{"type":"tool-input-start","toolCallId":"c","toolName":"t"}`)})
		s, err := dec.decode(frame{Data: b})
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("decode error %v is not an ErrProtocol", err)
			}
			return
		}
		checkStep(t, s)
	})
}
