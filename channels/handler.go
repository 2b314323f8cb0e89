package channels

import (
	"context"
	"encoding/json"
)

// Handler implements the channels of one topic pattern (Endpoint.Handle).
// All three methods of one socket's channels run on that socket's reader
// goroutine, except Terminate after Channel.Close, which runs on Close's
// caller.
type Handler interface {
	// Join runs on the socket's reader goroutine; later frames of the socket
	// wait until it returns and its reply is written. Return a *ReplyError to
	// refuse; any other error refuses with {"reason":"internal"} (logged).
	// A panic refuses with {"reason":"join crashed"}.
	Join(ctx context.Context, ch *Channel, payload json.RawMessage) (JoinResult, error)
	// HandleIn handles a client push on a joined channel. Return (nil, nil) for
	// no reply, a response value for an ok reply, or a *ReplyError for an
	// error reply; any other error becomes {"reason":"internal"} (logged). A
	// panic sends phx_error {"reason":"channel_crash"} and removes the channel.
	HandleIn(ctx context.Context, ch *Channel, event string, payload json.RawMessage) (any, error)
	// Terminate is called exactly once for every channel whose Join
	// succeeded, when the channel ends, with why. Channels whose join failed
	// are never terminated.
	Terminate(ch *Channel, reason CloseReason)
}

// BinaryHandler is implemented by handlers that accept binary pushes (V2
// binary frames). Without it a binary push gets the error reply
// {"reason":"binary payload not supported"}. Return values as for HandleIn.
type BinaryHandler interface {
	HandleBinary(ctx context.Context, ch *Channel, event string, payload []byte) (any, error)
}

// JoinResult is what a successful Join returns.
type JoinResult struct {
	// Response is the ok reply's response object ({} when nil). Same types as
	// Push.Payload.
	Response any
	// Then are pushes (with the join_ref) written right after the reply,
	// before any held or later broadcast: a replay.
	Then []Push
	// Skip is applied to every broadcast after Channel.Subscribe: those held
	// until the reply and every later one (a replayed event's live copy may
	// arrive after the reply); true drops the broadcast. Nil keeps them all.
	Skip func(b *Broadcast) bool
}
