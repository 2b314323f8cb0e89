package session

import (
	"encoding/json"
	"errors"
)

// EncodeTurnCheckpoint encodes the checkpoint document an actor writes while
// in's turn is queued behind another: the user's message in the history, the
// idempotency key remembered, the input pending. Tests of the input contract
// store it and read it back with DecodeTurnCheckpoint.
func EncodeTurnCheckpoint(in Input, pos Position) ([]byte, error) {
	keys := newKeySet(16, nil)
	keys.add(in.IdempotencyKey, pos)
	return json.Marshal(snapshot{
		Version: snapshotVersion,
		Seq:     pos.Seq,
		History: []Message{{Role: "user", Content: inputText(in)}},
		Keys:    keys.entries(),
		Pending: []pendingInput{{Input: in, Epoch: pos.Epoch, Seq: pos.Seq}},
	})
}

// DecodeTurnCheckpoint reads back a document of EncodeTurnCheckpoint: the
// pending input and the history's one message.
func DecodeTurnCheckpoint(data []byte) (Input, Message, error) {
	s, err := decodeSnapshot(data)
	if err != nil {
		return Input{}, Message{}, err
	}
	if len(s.Pending) != 1 || len(s.History) != 1 {
		return Input{}, Message{}, errTestShape
	}
	return s.Pending[0].Input, s.History[0], nil
}

// InputText is inputText for external tests.
func InputText(in Input) string { return inputText(in) }

var errTestShape = errors.New("checkpoint does not hold one pending input and one message")
